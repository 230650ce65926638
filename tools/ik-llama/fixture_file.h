#pragma once
// The MLAQFIX1 fixture file the dumpers write and tests/quant read:
//   "MLAQFIX1" | u32 type id | u32 rows | u32 cols | u32 row_bytes |
//   rows * row_bytes bytes (the quantized rows) | rows * cols f32 (ik's dequantization)
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ggml.h"

inline bool write_fixture(const std::string& path, ggml_type type, int rows, int cols, size_t row_bytes,
                          const std::vector<uint8_t>& q, const std::vector<float>& y) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  const uint32_t head[4] = {static_cast<uint32_t>(type), static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                            static_cast<uint32_t>(row_bytes)};
  std::fwrite("MLAQFIX1", 1, 8, f);
  std::fwrite(head, 4, 4, f);
  std::fwrite(q.data(), 1, q.size(), f);
  std::fwrite(y.data(), 4, y.size(), f);
  std::fclose(f);
  std::printf("%s: %d x %d, %zu bytes per row\n", path.c_str(), rows, cols, row_bytes);
  return true;
}
