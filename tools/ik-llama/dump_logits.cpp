// ik_llama.cpp's logits on a fixed token sequence, for the recipe fixtures
// (tests/fixtures/ik-recipes, made by make-recipe-fixtures.sh). Built against an ik_llama.cpp
// build tree (its llama.h, static libllama.a and libggml.a); nothing of ik_llama.cpp is committed.
//
//   dump_logits MODEL TOKENS OUT_PREFIX MODE...
// TOKENS: comma-separated token ids. MODE: NAME:MLA:FA:UBATCH, e.g. mla3-fa:3:1:512 (ik's -mla,
// -fa on/off and -ub). Each mode loads the model afresh (ik prepares its MLA tensors at load for
// the -mla value), evaluates TOKENS from position 0 in one llama_decode call with every position's
// logits requested (the context splits it into ubatches of UBATCH tokens: 1 is token-by-token
// decode), and writes OUT_PREFIX.NAME.f32: n_tokens x n_vocab little-endian float32, row-major.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

struct Mode {
  std::string name;
  int mla = 0;
  bool flash_attn = false;
  int ubatch = 0;
};

bool parse_mode(const std::string& s, Mode& m) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  if (parts.size() != 4 || parts[0].empty()) return false;
  m.name = parts[0];
  m.mla = std::atoi(parts[1].c_str());
  m.flash_attn = parts[2] == "1";
  m.ubatch = std::atoi(parts[3].c_str());
  return m.ubatch > 0;
}

std::vector<llama_token> parse_tokens(const std::string& s) {
  std::vector<llama_token> out;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ',');) out.push_back(static_cast<llama_token>(std::atoi(p.c_str())));
  return out;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

bool run_mode(const char* model_path, const std::vector<llama_token>& tokens, const Mode& m, const std::string& out) {
  llama_model_params mp = llama_model_default_params();
  mp.mla = m.mla;
  mp.use_mmap = true;
  llama_model* model = llama_model_load_from_file(model_path, mp);
  if (!model) {
    std::fprintf(stderr, "%s: cannot load %s\n", m.name.c_str(), model_path);
    return false;
  }
  const int n = static_cast<int>(tokens.size());
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = static_cast<uint32_t>(n);
  cp.n_ubatch = static_cast<uint32_t>(m.ubatch);
  cp.n_threads = cp.n_threads_batch = 2;
  cp.flash_attn = m.flash_attn;
  cp.mla_attn = m.mla;
  cp.seed = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "%s: cannot make a context\n", m.name.c_str());
    llama_free_model(model);
    return false;
  }
  llama_batch batch = llama_batch_init(n, 0, 1);
  batch.n_tokens = n;
  for (int i = 0; i < n; ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  bool ok = llama_decode(ctx, batch) == 0;
  if (!ok) std::fprintf(stderr, "%s: llama_decode failed\n", m.name.c_str());
  const int n_vocab = llama_n_vocab(model);
  FILE* f = ok ? std::fopen(out.c_str(), "wb") : nullptr;
  if (ok && !f) std::fprintf(stderr, "cannot write %s\n", out.c_str());
  ok = ok && f;
  for (int i = 0; ok && i < n; ++i) {
    const float* row = llama_get_logits_ith(ctx, i);
    ok = row && std::fwrite(row, sizeof(float), n_vocab, f) == static_cast<size_t>(n_vocab);
  }
  if (f) std::fclose(f);
  if (ok)
    std::printf("%s: %d x %d logits (-mla %d -fa %d -ub %d)\n", out.c_str(), n, n_vocab, m.mla, m.flash_attn, m.ubatch);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_free_model(model);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL TOKENS OUT_PREFIX NAME:MLA:FA:UBATCH...\n", argv[0]);
    return 2;
  }
  const std::vector<llama_token> tokens = parse_tokens(argv[2]);
  if (tokens.empty()) {
    std::fprintf(stderr, "no tokens in '%s'\n", argv[2]);
    return 2;
  }
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  bool ok = true;
  for (int i = 4; ok && i < argc; ++i) {
    Mode m;
    if (!parse_mode(argv[i], m)) {
      std::fprintf(stderr, "bad mode '%s' (want NAME:MLA:FA:UBATCH)\n", argv[i]);
      return 2;
    }
    ok = run_mode(argv[1], tokens, m, std::string(argv[3]) + "." + m.name + ".f32");
  }
  llama_backend_free();
  return ok ? 0 : 1;
}
