#include "model/weights.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <unordered_set>
#include <utility>

#include "gguf/gguf.h"
#include "model/tensor_binder.h"
#include "quant/packed.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {
namespace {

// Fills w_uk / w_uk_t / w_uv of one layer from whichever MLA tensors the file carries: views of
// the file's rows where the form is the file's, an F32 transpose where it is not.
void bind_mla(Binder& b, const DeepseekConfig& c, int64_t il, const WeightLoadOptions& opt, LayerWeights& L,
              MlaLayout& layout) {
  const int64_t H = c.n_head, R = c.kv_lora_rank, N = c.qk_nope, V = c.v_head;
  const bool split = b.has(blk(il, "attn_k_b")) || b.has(blk(il, "attn_v_b"));
  // The rows of t from `first_row` on, head_rows rows per head, in t's type.
  auto view = [&](const GgufTensorInfo& t, int64_t first_row, int64_t head_rows) {
    b.check_dequantizable(t);
    const int64_t row_bytes = ggml_row_bytes(t.type, t.ne[0]);
    return MlaProj(t.data + first_row * row_bytes, t.type, row_bytes, head_rows);
  };
  // dst[h][j][i] = src[h][i][j] for src's head rows of `cols` elements, n_rows rows a head.
  auto transposed = [&](const MlaProj& src, int64_t n_rows, int64_t cols) {
    auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(H * n_rows * cols));
    std::vector<float> buf(static_cast<size_t>(n_rows * cols));
    for (int64_t h = 0; h < H; ++h) {
      const float* s = mla_proj_head(src, h, n_rows, cols, buf.data());
      float* d = out->data() + h * n_rows * cols;
      for (int64_t i = 0; i < n_rows; ++i)
        for (int64_t j = 0; j < cols; ++j) d[j * n_rows + i] = s[i * cols + j];
    }
    L.mla_f32.push_back(out);
    return MlaProj(out->data());
  };
  if (split) {
    layout = MlaLayout::Split;
    // ik_llama.cpp's converter writes attn_kv_b beside the pair (its -mla 2/3 prefill reads it):
    // the same weights in the fused form, left unread here and not reported as unused.
    b.find(blk(il, "attn_kv_b"));
    const MlaProj uk = view(b.require_either(blk(il, "attn_k_b"), {N, R, H}, {N, H * R}), 0, R);  // [H][R][N]
    L.w_uv = view(b.require_either(blk(il, "attn_v_b"), {R, V, H}, {R, H * V}), 0, V);            // [H][V][R]
    if (opt.need_mqa) L.w_uk = uk;
    if (opt.need_mha) L.w_uk_t = transposed(uk, R, N);
  } else {
    layout = MlaLayout::Fused;
    // Rows h*(N+V) + d: K rows d < N, then V rows.
    const GgufTensorInfo& t = b.require(blk(il, "attn_kv_b"), {R, H * (N + V)});
    const MlaProj uk_t = view(t, 0, N + V);  // [H][N][R], heads N + V rows apart
    L.w_uv = view(t, N, N + V);
    if (opt.need_mha) L.w_uk_t = uk_t;
    if (opt.need_mqa) L.w_uk = transposed(uk_t, N, R);
  }
}

// One decoder block's tensors, blk.il (a trunk layer or the MTP block's inner block).
void bind_layer(Binder& b, const DeepseekConfig& c, int64_t il, const WeightLoadOptions& opt, bool indexer,
                LayerWeights& L, MlaLayout& layout) {
  const int64_t E = c.n_embd, qk_out = c.n_head * c.qk_head;
  L.attn_norm = b.vec(blk(il, "attn_norm"), E);
  if (c.is_lite) {
    L.attn_q = b.matrix(blk(il, "attn_q"), {E, qk_out});
  } else {
    L.attn_q_a = b.matrix(blk(il, "attn_q_a"), {E, c.q_lora_rank});
    L.attn_q_a_norm = b.vec(blk(il, "attn_q_a_norm"), c.q_lora_rank);
    L.attn_q_b = b.matrix(blk(il, "attn_q_b"), {c.q_lora_rank, qk_out});
  }
  L.attn_kv_a_mqa = b.matrix(blk(il, "attn_kv_a_mqa"), {E, c.latent_dim});
  L.attn_kv_a_norm = b.vec(blk(il, "attn_kv_a_norm"), c.kv_lora_rank);
  bind_mla(b, c, il, opt, L, layout);
  L.attn_output = b.matrix(blk(il, "attn_output"), {c.n_head * c.v_head, E});
  L.ffn_norm = b.vec(blk(il, "ffn_norm"), E);
  if (indexer) {
    const int64_t D = c.indexer_head_dim;
    L.idx_q_b = b.matrix(blk(il, "indexer.attn_q_b"), {c.q_lora_rank, c.n_indexer_head * D});
    L.idx_k = b.matrix(blk(il, "indexer.attn_k"), {E, D});
    L.idx_k_norm = b.vec(blk(il, "indexer.k_norm"), D);
    L.idx_k_norm_b = b.vec(blk(il, "indexer.k_norm", "bias"), D);
    L.idx_proj = b.matrix(blk(il, "indexer.proj"), {E, c.n_indexer_head});
  }

  L.is_moe = c.layer_is_moe(il);
  if (!L.is_moe) {
    L.ffn_gate = b.matrix(blk(il, "ffn_gate"), {E, c.n_ff});
    L.ffn_up = b.matrix(blk(il, "ffn_up"), {E, c.n_ff});
    L.ffn_down = b.matrix(blk(il, "ffn_down"), {c.n_ff, E});
    return;
  }
  const int64_t X = c.n_expert, F = c.n_ff_exp;
  L.ffn_gate_inp = b.matrix(blk(il, "ffn_gate_inp"), {E, X});
  if (b.has(blk(il, "exp_probs_b", "bias"))) L.exp_probs_b = b.vec(blk(il, "exp_probs_b", "bias"), X);
  if (b.has(blk(il, "ffn_gate_up_exps"))) {
    L.gate_up_merged = true;
    L.ffn_gate_up_exps = b.matrix(blk(il, "ffn_gate_up_exps"), {E, 2 * F, X});
  } else {
    L.ffn_gate_exps = b.matrix(blk(il, "ffn_gate_exps"), {E, F, X});
    L.ffn_up_exps = b.matrix(blk(il, "ffn_up_exps"), {E, F, X});
  }
  L.ffn_down_exps = b.matrix(blk(il, "ffn_down_exps"), {F, E, X});
  if (c.n_expert_shared > 0) {
    const int64_t S = F * c.n_expert_shared;
    L.ffn_gate_shexp = b.matrix(blk(il, "ffn_gate_shexp"), {E, S});
    L.ffn_up_shexp = b.matrix(blk(il, "ffn_up_shexp"), {E, S});
    L.ffn_down_shexp = b.matrix(blk(il, "ffn_down_shexp"), {S, E});
  }
}

// Every matmul weight but the embedding table (read a row at a time) repacked where possible;
// expert tensors are packed per expert slice (repack_matrix_set: the copy is made only when it fits
// in the available memory; a model larger than memory keeps relying on the file mapping's paging).
// Each source range is then dropped from the mapping (MADV_DONTNEED
// on a read-only private file mapping: a later read faults the file back in), so resident memory
// stays about what it was. stream_experts: the routed experts are left to the expert cache, which
// packs each as it enters.
void repack_matrices(DeepseekWeights& w, const DeepseekConfig& c, bool stream_experts) {
  std::vector<std::pair<WeightMatrix*, int64_t>> todo;  // matrix, rows per slice
  if (!w.output_tied) todo.emplace_back(&w.output, w.output.n_rows);
  std::vector<LayerWeights*> layers;
  for (LayerWeights& L : w.layers) layers.push_back(&L);
  if (w.nextn.present) {
    layers.push_back(&w.nextn.layer);
    todo.emplace_back(&w.nextn.eh_proj, w.nextn.eh_proj.n_rows);
    if (w.nextn.head.data) todo.emplace_back(&w.nextn.head, w.nextn.head.n_rows);
  }
  for (LayerWeights* Lp : layers) {
    LayerWeights& L = *Lp;
    for (WeightMatrix* m :
         {&L.attn_q_a, &L.attn_q_b, &L.attn_q, &L.attn_kv_a_mqa, &L.attn_output, &L.idx_q_b, &L.idx_k, &L.idx_proj,
          &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.ffn_gate_inp, &L.ffn_gate_shexp, &L.ffn_up_shexp, &L.ffn_down_shexp})
      todo.emplace_back(m, m->n_rows);
    if (stream_experts) continue;
    todo.emplace_back(&L.ffn_gate_exps, c.n_ff_exp);
    todo.emplace_back(&L.ffn_up_exps, c.n_ff_exp);
    todo.emplace_back(&L.ffn_gate_up_exps, 2 * c.n_ff_exp);
    todo.emplace_back(&L.ffn_down_exps, c.n_embd);
  }
  w.packed = repack_matrix_set(todo);
}

}  // namespace

std::vector<float> dequantize_tensor(const GgufFile& f, const std::string& name) {
  Binder b(f, "gguf");
  const GgufTensorInfo* t = b.find(name);
  if (!t) fail("gguf: {}: missing tensor '{}'", f.path(), name);
  return b.to_f32(*t);
}

namespace {

// MemAvailable from /proc/meminfo; half the physical memory where that cannot be read.
double available_memory_bytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    std::fclose(f);
    if (kb > 0) return static_cast<double>(kb) * 1024.0;
  }
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 2;
}

}  // namespace

std::shared_ptr<PackedWeightStore> repack_matrix_set(const std::vector<std::pair<WeightMatrix*, int64_t>>& todo) {
  int64_t total = 0;
  for (auto [m, slice] : todo) total += m->data ? repacked_bytes(*m, slice) : 0;
  if (total == 0) return nullptr;
  // The copy is anonymous memory (the file pages it replaces are dropped below and are page cache
  // anyway): it must fit in what the kernel says is available, with room left for the caches.
  const double avail = available_memory_bytes();
  if (static_cast<double>(total) > 0.85 * avail) {
    log().info(
        "weights not repacked: the copy would take {:.1f} GiB of {:.1f} GiB available memory (row-major kernels "
        "used)",
        static_cast<double>(total) / (1 << 30), avail / (1 << 30));
    return nullptr;
  }
  auto store = std::make_shared<PackedWeightStore>();
  // One huge-page arena for all the copies (decode streams them all every step).
  store->reserve(static_cast<size_t>(total));
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (auto [m, slice] : todo) {
    if (!m->data || !repack_weight(*m, slice, *store)) continue;
    // The whole pages inside the tensor's bytes.
    const auto addr = reinterpret_cast<uintptr_t>(m->data);
    const auto bytes = static_cast<uintptr_t>(m->n_rows * m->row_bytes);
    const uintptr_t lead = (page - addr % page) % page;
    if (bytes > lead && (bytes - lead) / page > 0)
      madvise(const_cast<uint8_t*>(m->data) + lead, (bytes - lead) / page * page, MADV_DONTNEED);
  }
  log().info("weights repacked into 16-row groups for the {} packed GEMM: {:.1f} MiB (--no-repack: off)",
             packed_gemm_family(), static_cast<double>(store->bytes()) / (1 << 20));
  return store;
}

DeepseekWeights bind_deepseek_weights(const GgufFile& f, const DeepseekConfig& c, const WeightLoadOptions& opt) {
  Binder b(f, model_arch_name(c.arch));
  DeepseekWeights w;
  const int64_t E = c.n_embd;
  w.token_embd = b.matrix("token_embd.weight", {E, c.n_vocab});
  w.output_norm = b.vec("output_norm.weight", E);
  if (b.has("output.weight")) {
    w.output = b.matrix("output.weight", {E, c.n_vocab});
  } else {
    w.output = w.token_embd;
    w.output_tied = true;
  }

  w.layers.resize(c.n_layer);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    MlaLayout layout;
    bind_layer(b, c, il, opt, /*indexer=*/c.indexer_key_dim(il) > 0, w.layers[il], layout);
    if (il == 0) w.layout = layout;
  }
  if (opt.load_mtp) {
    if (c.n_nextn < 1)
      fail(
          "{}: {}: speculative decoding with method mtp needs an MTP (nextn) layer; the file has none "
          "(nextn_predict_layers is 0)",
          model_arch_name(c.arch), f.path());
    NextnWeights& n = w.nextn;
    const int64_t il = c.n_layer;
    n.present = true;
    n.layer_index = il;
    n.eh_proj = b.matrix(blk(il, "nextn.eh_proj"), {2 * E, E});
    n.enorm = b.vec(blk(il, "nextn.enorm"), E);
    n.hnorm = b.vec(blk(il, "nextn.hnorm"), E);
    n.head_norm =
        b.has(blk(il, "nextn.shared_head_norm")) ? b.vec(blk(il, "nextn.shared_head_norm"), E) : w.output_norm;
    if (b.has(blk(il, "nextn.shared_head_head"))) n.head = b.matrix(blk(il, "nextn.shared_head_head"), {E, c.n_vocab});
    if (b.has(blk(il, "nextn.embed_tokens"))) n.embed = b.matrix(blk(il, "nextn.embed_tokens"), {E, c.n_vocab});
    MlaLayout layout;
    // The draft block attends densely: an indexer it may carry is not read.
    bind_layer(b, c, il, opt, /*indexer=*/false, n.layer, layout);
  }
  b.report_unbound(c.n_layer);
  // Before repacking: a budget it refuses is refused at once.
  if (opt.expert_cache.budget_bytes > 0) {
    w.expert_cache = std::make_shared<ExpertCache>(f, c, w, opt.expert_cache);
    log().info("{}", w.expert_cache->describe());
  }
  if (opt.repack) repack_matrices(w, c, opt.expert_cache.budget_bytes > 0);
  // After repacking, so that the fallbacks share the trunk's packed copies.
  if (w.nextn.present && !w.nextn.head.data) w.nextn.head = w.output;
  if (w.nextn.present && !w.nextn.embed.data) w.nextn.embed = w.token_embd;
  // One line per load (tests count them: a command loads a file once).
  const char* forms = opt.need_mha && opt.need_mqa ? "mha+mqa" : opt.need_mha ? "mha" : "mqa";
  log().debug("{}: {}: weights bound: {} layers{}, W_UK for {}, {}", model_arch_name(c.arch), f.path(), c.n_layer,
              w.nextn.present ? " + MTP" : "", forms, w.packed ? "matrices repacked" : "matrices row-major");
  return w;
}

}  // namespace mla
