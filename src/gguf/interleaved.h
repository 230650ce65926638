#pragma once
// ik_llama.cpp's row-interleaved forms (Q4_0_R8, Q8_0_R8, Q4_K_R4, ...): the blocks of 4, 8 or 16
// consecutive rows of a base type, rearranged so that one load reaches the same block of every
// row. Where the rearrangement keeps every bit of the base blocks (or the form's values are
// exactly a base type's: Q8_K_R8 as Q8_0), it can be undone at load time and every kernel of the
// base type serves the tensor: the GGUF reader does so, and the tensor then reads as its base
// type (GgufTensorInfo::file_type_id keeps the file's id).
#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

#include "util/ggml_type.h"

namespace mla {

struct IkInterleavedForm {
  uint32_t ik_id;         // the id ik_llama.cpp writes in a file
  std::string_view name;  // ik_llama.cpp's name: "Q4_K_R4"
  GgmlType base;          // the type whose rows it holds
  int n_interleaved;      // rows per group (4, 8 or 16)
  // Converts n_rows rows of n_cols elements in this form (n_rows a multiple of n_interleaved,
  // n_cols of row_block_elems()) into the same rows in the base type.
  void (*convert)(const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst);
  // The form's own geometry in the file where it differs from the base type's (IQ1_S_R4: 32-element
  // blocks of 6 bytes after a 2-byte row scale, where IQ1_S has 256-element blocks of 50 bytes;
  // Q8_K_R8: 256-element blocks of 258 bytes, read as Q8_0); 0: the base type's.
  int64_t file_block_elems = 0, file_block_bytes = 0, file_row_meta_bytes = 0;

  // Bytes one row of n elements takes in the file.
  int64_t file_row_bytes(int64_t n) const {
    return file_block_elems ? file_row_meta_bytes + n / file_block_elems * file_block_bytes : ggml_row_bytes(base, n);
  }
  // What a row's length must be a multiple of: the base type's block and the file's.
  int64_t row_block_elems() const { return std::max(ggml_traits(base).block_elems, file_block_elems); }
};

// The forms mla.cpp converts; nullptr for any other id.
const IkInterleavedForm* ik_interleaved_form(uint32_t ik_id);
// All of them, in ik id order.
std::span<const IkInterleavedForm> ik_interleaved_forms();

// src: n_rows rows of n_cols elements in form f (n_rows * f.file_row_bytes(n_cols) bytes; n_rows a
// multiple of f.n_interleaved, n_cols of f.row_block_elems()); dst: the same rows in the base type,
// n_rows * ggml_row_bytes(f.base, n_cols) bytes. Throws mla::Error on a bad shape.
void deinterleave_rows(const IkInterleavedForm& f, const uint8_t* src, int64_t n_rows, int64_t n_cols, uint8_t* dst);

}  // namespace mla
