// mla gguf quantize IN OUT TYPE [--tensor-type PATTERN=TYPE ...] [--threads N] [--plan]: writes a
// copy of IN with its weights quantized to llama-quantize's file type TYPE (f16, q8_0, q4_0, q5_0,
// q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k, iq4_nl, iq4_xs, mxfp4_moe, iq1_s, iq1_m, iq2_xxs,
// iq2_xs, iq2_s, iq2_m, iq3_xxs, iq3_xs, iq3_s, iq3_m) under its per-role rules, with per-tensor
// overrides (src/quant/quantize_plan.h). Metadata is copied unchanged except
// general.file_type and general.quantization_version (and the split.* keys of a split input: the
// output is one file). The output is assembled in memory (fine for
// the small models this is used on) and written atomically.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quant/quantize_plan.h"
#include "util/error.h"

namespace mla::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
  std::vector<std::string> tensor_types;
  int threads = 0;
  bool plan_only = false;
};

// Quantizes (or converts) every row of t to `to`, rows split over threads.
std::vector<uint8_t> convert_tensor(const GgufTensorInfo& t, GgmlType to, int n_threads) {
  const int64_t n_cols = t.ne.empty() ? 1 : t.ne[0];
  const int64_t n_rows = t.n_rows();
  const int64_t src_row_bytes = ggml_row_bytes(t.type, n_cols);
  const int64_t dst_row_bytes = ggml_row_bytes(to, n_cols);
  std::vector<uint8_t> out(static_cast<size_t>(dst_row_bytes * n_rows));
  const DequantizeFn dequantize = dequantize_fn(t.type);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    std::vector<float> row(static_cast<size_t>(n_cols));
    for (int64_t r; (r = next.fetch_add(16)) < n_rows;)
      for (int64_t i = r; i < std::min(n_rows, r + 16); ++i) {
        dequantize(t.data + i * src_row_bytes, row.data(), n_cols);
        quantize_row(to, row.data(), out.data() + i * dst_row_bytes, n_cols);
      }
  };
  std::vector<std::thread> pool;
  const int n = static_cast<int>(std::clamp<int64_t>(n_rows / 16, 1, n_threads));
  for (int i = 1; i < n; ++i) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  return out;
}

void quantize_file(const QuantizeArgs& a) {
  const auto ft = parse_quant_file_type(a.type);
  if (!ft) fail("gguf quantize: unknown file type '{}' (expected one of {})", a.type, quant_file_type_list());
  std::vector<TensorTypeOverride> overrides;
  for (const auto& spec : a.tensor_types) overrides.push_back(parse_tensor_type_override(spec));
  auto f = GgufFile::open(a.in);
  const std::vector<TensorQuantPlan> plan = plan_quantization(*f, *ft, overrides);

  int64_t bytes_in = 0, bytes_out = 0, n_weights = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const GgufTensorInfo& t = f->tensors()[i];
    const int64_t out_bytes = ggml_row_bytes(plan[i].to, t.ne.empty() ? 1 : t.ne[0]) * t.n_rows();
    bytes_in += static_cast<int64_t>(t.n_bytes);
    bytes_out += out_bytes;
    n_weights += t.n_elements;
    fmt::print("{:<34} {:<18} {:>5} -> {:<7} {}\n", t.name, t.shape_string(), ggml_type_name(plan[i].from),
               ggml_type_name(plan[i].to), plan[i].reason);
  }
  fmt::print("{}: {} tensors, {:.2f} MiB -> {:.2f} MiB ({:.3f} bits per weight)\n", quant_file_type_name(*ft),
             plan.size(), bytes_in / 1048576.0, bytes_out / 1048576.0,
             8.0 * bytes_out / std::max<int64_t>(1, n_weights));
  if (a.plan_only) return;

  const int n_threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  GgufWriter w;
  for (const auto& [key, value] : f->metadata())
    if (key != "general.alignment" && !is_gguf_split_key(key)) w.set(key, value);  // one output file
  if (auto al = f->opt_uint("general.alignment"))
    w.set("general.alignment", GgufValue::u32(static_cast<uint32_t>(*al)));
  w.set("general.file_type", GgufValue::u32(quant_file_type_id(*ft)));
  w.set("general.quantization_version", GgufValue::u32(2));
  for (size_t i = 0; i < plan.size(); ++i) {
    const GgufTensorInfo& t = f->tensors()[i];
    if (plan[i].to == t.type) {
      w.add_tensor(t.name, t.type, t.ne, t.data, t.n_bytes);
    } else {
      w.add_tensor(t.name, plan[i].to, t.ne, convert_tensor(t, plan[i].to, n_threads));
    }
  }
  w.write(a.out);
  fmt::print("wrote {}\n", a.out);
}

}  // namespace

void register_gguf_quantize(CLI::App& gguf) {
  auto* cmd = gguf.add_subcommand("quantize",
                                  "Quantize a GGUF's weights to a file type (per-tensor types after llama-quantize's)");
  static QuantizeArgs a;
  cmd->add_option(
         "input", a.in,
         "Input GGUF (F32/F16/BF16 weights; quantized ones only to dequantize, e.g. f16 --tensor-type '.=f32')")
      ->required();
  cmd->add_option("output", a.out, "Output GGUF")->required();
  cmd->add_option("type", a.type, "File type as llama-quantize names it: " + quant_file_type_list())->required();
  cmd->add_option("--tensor-type", a.tensor_types,
                  "PATTERN=TYPE: tensors whose name matches the regular expression PATTERN get the ggml type TYPE "
                  "(first match wins; repeatable), e.g. 'ffn_(gate|up)_exps=iq2_xxs'");
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all hardware threads)");
  cmd->add_flag("--plan", a.plan_only, "Print the per-tensor types only; write nothing");
  cmd->callback([] { quantize_file(a); });
}

}  // namespace mla::cli
