// The pieces of the multi-process runtime that need no MPI: shard ranges, the step message, the
// environment hand-over. (Runs under mpirun are tests/py/test_mpi.py.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/batch.h"
#include "parallel/comm.h"
#include "parallel/env_sync.h"
#include "parallel/step_wire.h"
#include "util/error.h"

namespace mla {
namespace {

TEST(ShardRange, ContiguousBalancedByCountCoveringEverything) {
  // 7 experts on 3 ranks: 3 + 2 + 2, the extra one to the first rank.
  EXPECT_EQ(shard_range(7, 0, 3).begin, 0);
  EXPECT_EQ(shard_range(7, 0, 3).end, 3);
  EXPECT_EQ(shard_range(7, 1, 3).begin, 3);
  EXPECT_EQ(shard_range(7, 1, 3).end, 5);
  EXPECT_EQ(shard_range(7, 2, 3).begin, 5);
  EXPECT_EQ(shard_range(7, 2, 3).end, 7);
  for (int n : {1, 5, 8, 64, 256})
    for (int ranks = 1; ranks <= n && ranks <= 9; ++ranks) {
      int64_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < ranks; ++r) {
        const ShardRange s = shard_range(n, r, ranks);
        EXPECT_EQ(s.begin, next);
        next = s.end;
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1);
    }
}

TEST(StepWire, BatchAndCopiesRoundTrip) {
  BatchMeta m;
  m.token_ids = {5, 6, 7, 9};
  m.positions = {0, 1, 2, 40};
  m.slot_mapping = {16, 17, 18, 71};
  m.seqs = {{.query_start = 0, .query_len = 3, .context_len = 3, .slots_start = 0, .n_prompt = 3},
            {.query_start = 3, .query_len = 1, .context_len = 41, .slots_start = 3, .verify = true, .n_prompt = 37}};
  m.context_slots = {16, 17, 18};
  for (int j = 0; j < 41; ++j) m.context_slots.push_back(j < 32 ? 32 + j : 64 + j - 32);
  m.logits_rows = {2, 3};
  m.policy = MlaPathPolicy::Mqa;
  m.decode_threshold = 3;
  const BlockCopies copies = {{3, 9}, {4, 10}};
  std::vector<int32_t> payload;
  const StepHeader h = encode_step(m, copies, payload);
  EXPECT_EQ(h.command, static_cast<int32_t>(StepCommand::Forward));

  BatchMeta got;
  BlockCopies got_copies;
  decode_step(h, payload, got, got_copies);
  EXPECT_EQ(got.token_ids, m.token_ids);
  EXPECT_EQ(got.positions, m.positions);
  EXPECT_EQ(got.slot_mapping, m.slot_mapping);
  ASSERT_EQ(got.seqs.size(), 2u);
  EXPECT_EQ(got.seqs[1].query_start, 3);
  EXPECT_EQ(got.seqs[1].context_len, 41);
  EXPECT_EQ(got.seqs[1].slots_start, 3);
  EXPECT_TRUE(got.seqs[1].verify);
  EXPECT_FALSE(got.seqs[0].verify);
  EXPECT_EQ(got.seqs[0].n_prompt, 3);  // the ranks' `auto` paths under F32 kernels follow it
  EXPECT_EQ(got.seqs[1].n_prompt, 37);
  EXPECT_EQ(got.context_slots, m.context_slots);
  EXPECT_EQ(got.logits_rows, m.logits_rows);
  EXPECT_EQ(got.policy, MlaPathPolicy::Mqa);
  EXPECT_EQ(got.decode_threshold, 3);
  EXPECT_EQ(got_copies, copies);

  payload.pop_back();  // a short payload is refused, not read past
  EXPECT_THROW(decode_step(h, payload, got, got_copies), Error);
}

TEST(EnvSync, MismatchesNameTheVariableAndBothValues) {
  const std::vector<std::string> root = {"MLA_LOG_LEVEL=debug", "MLA_TRACE=dispatch:2"};
  const std::vector<std::string> mine = {"MLA_PREFAULT=0", "MLA_TRACE=dispatch:8"};
  const auto w = env_mismatches(root, mine);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0], "environment: MLA_LOG_LEVEL is unset here but 'debug' on rank 0; rank 0's value is used");
  EXPECT_EQ(w[1], "environment: MLA_PREFAULT is '0' here but unset on rank 0; rank 0's value is used");
  EXPECT_EQ(w[2], "environment: MLA_TRACE is 'dispatch:8' here but 'dispatch:2' on rank 0; rank 0's value is used");
  EXPECT_TRUE(env_mismatches(root, root).empty());
}

TEST(EnvSync, EntriesSurviveTheJoinedForm) {
  const std::vector<std::string> e = {"MLA_A=", "MLA_B=x=y", "MLA_C=with space"};
  EXPECT_EQ(split_env(join_env(e)), e);
  EXPECT_TRUE(split_env(join_env({})).empty());
}

TEST(EnvSync, OnlyMlaEntriesSorted) {
  std::vector<std::string> entries = {"PATH=/bin", "MLA_TRACE=dispatch:1", "XMLA_X=1", "MLA_API_KEY=k"};
  std::vector<char*> env;
  for (auto& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  EXPECT_EQ(mla_env_entries(env.data()), (std::vector<std::string>{"MLA_API_KEY=k", "MLA_TRACE=dispatch:1"}));
}

}  // namespace
}  // namespace mla
