#pragma once
// Binds a model's tensors by name with their shape and type checked: the one place that turns a
// missing or misshapen tensor into a load error naming it (expected vs actual). Shared by the
// architectures' weight loaders (weights.cpp, deepseek4_weights.cpp); remembers what was bound so
// the loader can report the tensors nothing read.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/log.h"

namespace mla {

inline std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

inline std::vector<int64_t> trimmed(std::vector<int64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

class Binder {
 public:
  Binder(const GgufFile& f, const char* arch) : f_(f), arch_(arch) {}

  const GgufTensorInfo* find(const std::string& name) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (t) bound_.insert(name);
    return t;
  }
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  const GgufTensorInfo& require(const std::string& name, const std::vector<int64_t>& ne) {
    const GgufTensorInfo* t = find(name);
    if (!t) fail("{}: {}: missing tensor '{}' (expected shape {})", arch_, f_.path(), name, shape_str(ne));
    check_shape(*t, ne);
    return *t;
  }

  // A tensor of either of two shapes that hold the same bytes (attn_k_b / attn_v_b: llama.cpp's
  // converter writes them 3-D, {rows, kv_lora_rank or v_head, n_head}; ik_llama.cpp's 2-D, the
  // heads' rows one after another).
  const GgufTensorInfo& require_either(const std::string& name, const std::vector<int64_t>& ne,
                                       const std::vector<int64_t>& alt) {
    const GgufTensorInfo* t = find(name);
    if (!t) fail("{}: {}: missing tensor '{}' (expected shape {})", arch_, f_.path(), name, shape_str(ne));
    if (trimmed(t->ne) != trimmed(ne) && trimmed(t->ne) != trimmed(alt))
      fail("{}: {}: tensor '{}': expected shape {} or {}, got {}", arch_, f_.path(), name, shape_str(ne),
           shape_str(alt), shape_str(t->ne));
    return *t;
  }

  void check_shape(const GgufTensorInfo& t, const std::vector<int64_t>& ne) const {
    if (trimmed(t.ne) != trimmed(ne))
      fail("{}: {}: tensor '{}': expected shape {}, got {}", arch_, f_.path(), t.name, shape_str(ne), shape_str(t.ne));
  }

  // A matmul weight: rows of ne[0] elements, all higher dims flattened into rows. A companion
  // `<name>.scale` of shape {1} (written by some quantizers) becomes the matrix's output scale.
  WeightMatrix matrix(const std::string& name, const std::vector<int64_t>& ne) {
    WeightMatrix m = as_matrix(require(name, ne));
    const std::string suffix = ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string scale_name = name.substr(0, name.size() - suffix.size()) + ".scale";
      if (has(scale_name)) {
        m.scale = to_f32(require(scale_name, {1}))[0];
        if (!std::isfinite(m.scale))
          fail("{}: {}: tensor '{}' is {}, expected a finite scale", arch_, f_.path(), scale_name, m.scale);
      }
    }
    return m;
  }
  WeightMatrix as_matrix(const GgufTensorInfo& t) const {
    if (!matmul_supports(t.type))
      fail("{}: {}: tensor '{}' has type {}, which has no matmul kernel here", arch_, f_.path(), t.name,
           ggml_type_name(t.type));
    WeightMatrix m;
    m.type = t.type;
    m.data = t.data;
    m.n_cols = t.ne[0];
    m.n_rows = t.n_rows();
    m.row_bytes = ggml_row_bytes(t.type, t.ne[0]);
    return m;
  }

  // A small vector (norm weights, biases) converted to F32.
  std::vector<float> vec(const std::string& name, int64_t n) { return to_f32(require(name, {n})); }

  void check_dequantizable(const GgufTensorInfo& t) const {
    if (!can_dequantize(t.type))
      fail("{}: {}: tensor '{}' has type {}, which cannot be dequantized", arch_, f_.path(), t.name,
           ggml_type_name(t.type));
  }

  std::vector<float> to_f32(const GgufTensorInfo& t) const {
    check_dequantizable(t);
    std::vector<float> out(static_cast<size_t>(t.n_elements));
    const int64_t row_bytes = ggml_row_bytes(t.type, t.ne[0]);
    for (int64_t r = 0; r < t.n_rows(); ++r)
      dequantize_row(t.type, t.data + r * row_bytes, out.data() + r * t.ne[0], t.ne[0]);
    return out;
  }

  // The file's tensors nothing bound: the MTP (nextn) blocks' (blocks >= n_layer: kept in the
  // mapping, never read here) and any other (by name, in file order).
  struct Unbound {
    int64_t n_mtp = 0;
    std::vector<std::string> extra;
  };
  size_t n_bound() const { return bound_.size(); }

  // Logs the tensors nothing bound (a line for the MTP blocks', a warning for the others) and
  // returns them.
  Unbound report_unbound(int64_t n_layer) const {
    std::vector<std::string> extra;
    int64_t n_mtp = 0;
    for (const auto& t : f_.tensors()) {
      if (bound_.count(t.name)) continue;
      int64_t il = -1;
      if (std::sscanf(t.name.c_str(), "blk.%ld.", &il) == 1 && il >= n_layer)
        ++n_mtp;
      else
        extra.push_back(t.name);
    }
    if (n_mtp > 0)
      log().info(
          "{}: {}: {} tensor(s) of the MTP block(s) from blk.{} left unread (speculation off, or not used by the "
          "draft)",
          arch_, f_.path(), n_mtp, n_layer);
    if (!extra.empty()) {
      std::string names;
      for (size_t i = 0; i < extra.size() && i < 4; ++i) names += (i ? ", " : "") + extra[i];
      log().warn("{}: {}: {} tensor(s) not used by the forward pass (e.g. {})", arch_, f_.path(), extra.size(), names);
    }
    return {n_mtp, std::move(extra)};
  }

 private:
  const GgufFile& f_;
  const char* arch_;
  std::unordered_set<std::string> bound_;
};

inline std::string blk(int64_t il, const char* name, const char* suffix = "weight") {
  return fmt::format("blk.{}.{}.{}", il, name, suffix);
}

}  // namespace mla
