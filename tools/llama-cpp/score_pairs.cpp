// Scores (context, continuation) pairs with llama.cpp, the way lm-eval's loglikelihood requests
// split them: whole = tokenize(context + continuation), ctx = tokenize(context) (no BOS added,
// special tokens parsed), the continuation is whole's tokens after ctx's; its loglikelihood is
// the sum over those tokens of log p(token | the tokens before it), from one forward pass of the
// whole sequence (every position's logits). is_greedy: each continuation token is the argmax.
//
// Built and run by lm_eval_reference.py against the static llama.cpp build of build-perplexity.sh.
//   score_pairs MODEL.gguf < pairs.tsv      (one "context<TAB>continuation" per line)
// prints per pair: "<loglikelihood> <is_greedy 0|1> <ctx ids,> <continuation ids,>"
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

static std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text) {
  std::vector<llama_token> ids(text.size() + 8);
  int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                         static_cast<int32_t>(ids.size()), /*add_special=*/false, /*parse_special=*/true);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), false, true);
  }
  ids.resize(n);
  return ids;
}

static std::string join(const std::vector<llama_token>& ids, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to; ++i) s += (i > from ? "," : "") + std::to_string(ids[i]);
  return s;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf < pairs.tsv\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 1024;
  cp.n_batch = 1024;
  cp.n_ubatch = 1024;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::string line;
  while (std::getline(std::cin, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) return 3;
    std::string context = line.substr(0, tab), continuation = line.substr(tab + 1);
    // lm-eval moves the context's trailing spaces to the continuation.
    while (!context.empty() && context.back() == ' ') {
      continuation.insert(continuation.begin(), ' ');
      context.pop_back();
    }
    const auto whole = tokenize(vocab, context + continuation);
    const auto ctx_ids = tokenize(vocab, context);
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch batch = llama_batch_init(static_cast<int32_t>(whole.size()), 0, 1);
    batch.n_tokens = static_cast<int32_t>(whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      batch.token[i] = whole[i];
      batch.pos[i] = static_cast<llama_pos>(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    if (llama_decode(ctx, batch) != 0) return 4;
    double ll = 0;
    bool greedy = true;
    for (size_t i = ctx_ids.size(); i < whole.size(); ++i) {
      const float* row = llama_get_logits_ith(ctx, static_cast<int32_t>(i - 1));
      double m = row[0];
      int arg = 0;
      for (int v = 1; v < n_vocab; ++v)
        if (row[v] > m) m = row[v], arg = v;
      double sum = 0;
      for (int v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - m);
      ll += row[whole[i]] - (m + std::log(sum));
      greedy = greedy && arg == whole[i];
    }
    llama_batch_free(batch);
    std::printf("%.9f %d %s %s\n", ll, greedy ? 1 : 0, join(whole, 0, ctx_ids.size()).c_str(),
                join(whole, ctx_ids.size(), whole.size()).c_str());
  }
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
