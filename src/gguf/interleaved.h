#pragma once
// ik_llama.cpp's row-interleaved forms (Q4_0_R8, Q8_0_R8, Q4_K_R4, ...): the blocks of 4 or 8
// consecutive rows of a base type, rearranged so that one load reaches the same block of every
// row. Where the rearrangement keeps every bit of the base blocks, it can be undone at load time
// and every kernel of the base type serves the tensor: the GGUF reader does so, and the tensor
// then reads as its base type (GgufTensorInfo::file_type_id keeps the file's id).
#include <cstdint>
#include <string_view>

#include "util/ggml_type.h"

namespace mla {

struct IkInterleavedForm {
  uint32_t ik_id;         // the id ik_llama.cpp writes in a file
  std::string_view name;  // ik_llama.cpp's name: "Q4_K_R4"
  GgmlType base;          // the type whose rows it interleaves
  int n_interleaved;      // rows per group (4 or 8)
};

// The forms mla.cpp converts; nullptr for any other id.
const IkInterleavedForm* ik_interleaved_form(uint32_t ik_id);

// src: n_rows rows of n_cols elements in form f (n_rows a multiple of f.n_interleaved, n_cols of
// the base block); dst: the same rows in the base type, n_rows * ggml_row_bytes(f.base, n_cols)
// bytes (the interleaved form takes exactly as many). Throws mla::Error on a bad shape.
void deinterleave_rows(const IkInterleavedForm& f, const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst);

}  // namespace mla
