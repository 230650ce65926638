#pragma once
// Tensor-type ids of the two engines that write the GGUF files mla.cpp loads: mainline llama.cpp
// (ggml-org) and ik_llama.cpp. Both start from the same list (ids 0-30, MXFP4 = 39) and have since
// added ids independently; docs/FORMATS.md records which ids each assigns and how a file's ids are
// read. Today no id a file of either engine can hold means two different formats (ik's id 41,
// Q1_0_G128, is mainline's Q1_0 byte for byte), so every file reads the same in both spaces; the
// evidence rules below decide if the engines' assignments ever collide.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/interleaved.h"
#include "util/error.h"
#include "util/ggml_type.h"

namespace mla {

enum class TypeIdSpace { Either, Mainline, Ik };
std::string_view type_id_space_name(TypeIdSpace s);  // "either", "llama.cpp", "ik_llama.cpp"

// How every load error names a tensor's type id, with the id space it was read in:
// "IQ4_KS (ik_llama.cpp id 144)", "Q4_K (llama.cpp and ik_llama.cpp id 12)" (TypeIdSpace::Either: an
// id both engines give one format); an empty name: "unknown type id 37 (neither llama.cpp nor
// ik_llama.cpp assigns it)".
std::string type_id_label(std::string_view name, TypeIdSpace space, uint32_t id);

// One id as each engine assigns it. An empty name: the engine has no type at that id (never
// assigned, or retired and refused in files). `same_format`: both names denote one byte format.
// `type`: mla.cpp's type for the id (the format both names denote, or the one engine's), when
// mla.cpp knows its block geometry.
struct TypeIdEntry {
  uint32_t id;
  std::string_view mainline;
  std::string_view ik;
  bool same_format;
  std::optional<GgmlType> type;
};

// The table of every id either engine assigns, in id order.
std::span<const TypeIdEntry> type_id_table();

// What the reader knows about one tensor when it chooses a reading.
struct TypeIdTensor {
  std::string_view name;
  uint32_t id;
  int64_t n_elements;  // product of the dimensions
  int64_t row_length;  // ne[0]
  // Bytes from the tensor's offset to the next tensor's offset (or the end of the data section):
  // an upper bound on its size, since GGUF stores no tensor size.
  uint64_t room;
};

// The error resolve_type_ids throws: the message, and which tensor it is about.
class TypeIdError : public Error {
 public:
  TypeIdError(const std::string& msg, size_t tensor) : Error(msg), tensor_(tensor) {}
  size_t tensor() const { return tensor_; }

 private:
  size_t tensor_;
};

struct TypeIdResolution {
  TypeIdSpace space = TypeIdSpace::Either;
  std::vector<GgmlType> types;  // one per tensor
  // Per tensor: the space its id was read in (Either: an id both engines give the same format).
  std::vector<TypeIdSpace> spaces;
  // Per tensor: the ik_llama.cpp row-interleaved form its id names (its type is then the form's
  // base type, its rows to be converted), else nullptr.
  std::vector<const IkInterleavedForm*> interleaved;
};

// Reads every tensor's id. The file's space is the one its evidence names: a tensor id only one
// engine assigns, or a general.file_type only ik_llama.cpp uses (file_type >= 100). An id both
// engines assign to different formats is read in that space; with no evidence, or contradicting
// evidence, it is read by its byte size (the one reading whose size fits in `room` while the other
// does not), else refused. Throws TypeIdError naming the tensor, its id and the space(s) it was read
// in: an id neither engine assigns, a type mla.cpp has no layout for, an undecidable id. An
// ik_llama.cpp row-interleaved form mla.cpp converts reads as its base type.
// `table` defaults to type_id_table() (tests pass their own).
TypeIdResolution resolve_type_ids(std::span<const TypeIdTensor> tensors, std::optional<int64_t> file_type,
                                  std::span<const TypeIdEntry> table = type_id_table());

}  // namespace mla
