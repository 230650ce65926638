// mla gguf dequant FILE TENSOR -o OUT.f32: one tensor dequantized to raw little-endian float32
// (row-major, ne[0] fastest), through the same dequantize_row the engine uses. Tests compare it
// with gguf-py's dequantization.
#include <bit>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace mla::cli {

static_assert(std::endian::native == std::endian::little, "raw float32 output assumes a little-endian host");

void register_gguf_dequant(CLI::App& gguf) {
  auto* cmd = gguf.add_subcommand("dequant", "Write one tensor dequantized to raw little-endian float32");
  static std::string path, tensor, out;
  cmd->add_option("file", path, "GGUF file")->required();
  cmd->add_option("tensor", tensor, "Tensor name")->required();
  cmd->add_option("-o,--output", out, "Output file (raw float32)")->required();
  cmd->callback([] {
    auto f = GgufFile::open(path);
    const GgufTensorInfo& t = f->require_tensor(tensor);
    DequantizeFn dequantize = nullptr;
    try {
      dequantize = dequantize_fn(t.type);
    } catch (const Error& e) {
      fail("tensor '{}': {}", t.name, e.what());
    }
    const int64_t n_cols = t.ne.empty() ? 1 : t.ne[0];
    const int64_t row_bytes = ggml_row_bytes(t.type, n_cols);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(out.c_str(), "wb"), std::fclose);
    if (!fp) fail("cannot create '{}'", out);
    std::vector<float> row(static_cast<size_t>(n_cols));
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      dequantize(t.data + r * row_bytes, row.data(), n_cols);
      if (std::fwrite(row.data(), sizeof(float), row.size(), fp.get()) != row.size()) fail("write to '{}' failed", out);
    }
    if (std::fflush(fp.get()) != 0) fail("write to '{}' failed", out);
  });
}

}  // namespace mla::cli
