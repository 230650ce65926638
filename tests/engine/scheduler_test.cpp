// The scheduler on its own: what a plan item says (where the step starts, whether it verifies
// drafts), how the computed length advances after the forward, and when full blocks enter the
// prefix cache.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "engine/sequence.h"

namespace mla {
namespace {

Request request_of(std::vector<int32_t> prompt, int n = 1) {
  Request r;
  r.id = "r";
  r.prompt = std::move(prompt);
  r.params.n = n;
  r.params.seed = 7;
  return r;
}

TEST(Scheduler, ItemsStartWhereTheSequenceStoodAndTheForwardAdvancesThem) {
  kv::KvManager kv(16, 4, true);
  Scheduler sched({3, 8}, kv);
  Request req = request_of({1, 2, 3, 4, 5});
  Sequence& seq = req.add_sequence(0, nullptr);
  sched.add_waiting(&seq);

  const SchedulerOutput first = sched.schedule();
  ASSERT_EQ(first.items.size(), 1u);
  EXPECT_EQ(first.items[0].n_computed, 0);
  EXPECT_EQ(first.items[0].n_new, 3);
  EXPECT_FALSE(first.items[0].verify);
  sched.on_forward_done(first);
  EXPECT_EQ(seq.n_computed, 3);
  sched.on_step_done(first);

  const SchedulerOutput second = sched.schedule();
  ASSERT_EQ(second.items.size(), 1u);
  EXPECT_EQ(second.items[0].n_computed, 3);
  EXPECT_EQ(second.items[0].n_new, 2);
  sched.on_forward_done(second);
  EXPECT_EQ(seq.n_computed, 5);
  // One full block of 4 computed tokens: in the prefix cache after the step.
  EXPECT_EQ(kv.find_prefix(seq.tokens).n_tokens, 0);
  sched.on_step_done(second);
  EXPECT_EQ(kv.find_prefix(seq.tokens).n_tokens, 4);
  sched.remove(&seq);
}

TEST(Scheduler, DraftsMakeAVerifyItemWhoseLengthTheForwardLeavesAlone) {
  kv::KvManager kv(16, 4, false);
  Scheduler sched({16, 8}, kv);
  sched.configure_speculation(2, 64);
  Request req = request_of({1, 2, 3});
  Sequence& seq = req.add_sequence(0, nullptr);
  sched.add_waiting(&seq);
  const SchedulerOutput prefill = sched.schedule();
  sched.on_forward_done(prefill);
  sched.on_step_done(prefill);
  seq.tokens.push_back(9);  // sampled
  seq.drafts = {10, 11};

  const SchedulerOutput verify = sched.schedule();
  ASSERT_EQ(verify.items.size(), 1u);
  EXPECT_TRUE(verify.items[0].verify);
  EXPECT_EQ(verify.items[0].n_computed, 3);
  EXPECT_EQ(verify.items[0].n_new, 3);  // the last token and both drafts
  sched.on_forward_done(verify);
  EXPECT_EQ(seq.n_computed, 3);  // set by the acceptance, not the forward
  sched.remove(&seq);
}

TEST(Request, AddSequenceSeedsEachSequenceApartAndGivesTheFirstTheRequestsSlots) {
  Request req = request_of({4, 5, 6}, 3);
  Sequence& first = req.add_sequence(0, nullptr);
  Sequence& second = req.add_sequence(1, nullptr);
  ASSERT_EQ(req.seqs.size(), 2u);
  EXPECT_EQ(first.req, &req);
  EXPECT_EQ(first.tokens, req.prompt);
  EXPECT_EQ(first.n_prompt, 3);
  EXPECT_EQ(first.n_slots, 3);
  EXPECT_EQ(second.index, 1);
  EXPECT_EQ(second.n_slots, 1);
  Rng a(7), b(7 + 0x9e3779b97f4a7c15ull);
  EXPECT_EQ(first.rng.next(), a.next());
  EXPECT_EQ(second.rng.next(), b.next());
}

}  // namespace
}  // namespace mla
