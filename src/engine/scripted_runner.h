#pragma once
// A model runner whose outputs are written in advance: for testing everything above the model
// (sampling, stop handling, detokenizing, the HTTP API's parsers and streaming) with outputs a
// tiny model would never produce, such as tool calls. `mla serve --scripted-output FILE` uses it.
//
// The script is a list of (trigger, output) pairs. A sequence follows the first pair whose
// trigger occurs in its context's text (the context decoded; "" matches any); at each step the
// logits are one-hot on the output's next token, so greedy sampling (and any sampling with
// top_k=1 or a low temperature) writes the output token by token, then EOS. Where it is in the
// output is read from the context itself: the longest run of the output's tokens that ends the
// context (a prompt that already ends with the output's first tokens would confuse it).
//
// Each context row holds its token id (an F32 cache; exact below 2^24), so the context is read
// back through the block tables like a real model's KV, prefix caching and preemption included.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"

namespace mla {

struct ScriptEntry {
  std::string trigger;          // text to look for in the context
  std::vector<int32_t> output;  // tokens to generate
};

class ScriptedRunner : public ModelRunner {
 public:
  using DecodeFn = std::function<std::string(std::span<const int32_t>)>;
  ScriptedRunner(std::vector<ScriptEntry> script, int n_vocab, int32_t eos, DecodeFn decode, int max_context = 4096,
                 int block_size = 16, int32_t n_blocks = 1024);

  int n_vocab() const override { return n_vocab_; }
  int max_context() const override { return max_context_; }
  LatentCache& cache() override { return cache_; }
  void forward(const BatchMeta& meta, float* logits) override;

  // The token after `context` (exposed for tests).
  int32_t next_token(std::span<const int32_t> context) const;

 private:
  std::vector<ScriptEntry> script_;
  int n_vocab_;
  int32_t eos_;
  DecodeFn decode_;
  int max_context_;
  LatentCache cache_;
};

// Reads a script file: a JSON list of {"trigger": TEXT, "output": TEXT}; encode turns the
// output text into tokens. Throws mla::Error naming the problem.
std::vector<ScriptEntry> load_script(const std::string& path,
                                     const std::function<std::vector<int32_t>(const std::string&)>& encode);

}  // namespace mla
