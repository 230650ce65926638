#include "engine/sequence.h"

namespace mla {

Sequence& Request::add_sequence(int index, const TextDecoder* decoder) {
  auto seq = std::make_unique<Sequence>();
  seq->req = this;
  seq->index = index;
  seq->tokens = prompt;
  seq->n_prompt = static_cast<int>(prompt.size());
  seq->n_slots = index == 0 ? params.n : 1;
  // Sequence 0 draws from the seed itself; its siblings from seeds spaced by the golden ratio.
  seq->rng = Rng(*params.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index));
  seq->penalties.set_prompt(prompt);
  seq->output.start(decoder, prompt, params);
  if (params.grammar) seq->grammar = std::make_unique<GrammarMatcher>(params.grammar);
  seqs.push_back(std::move(seq));
  return *seqs.back();
}

bool Sequence::wants_prompt_logits() const {
  return req->params.prompt_logprobs && index == 0 && !req->prompt_logprobs_sent &&
         static_cast<int>(req->prompt_logprobs.size()) < n_prompt - 1;
}

}  // namespace mla
