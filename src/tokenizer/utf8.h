#pragma once
// UTF-8 validation by "maximal subparts" (Unicode §3.9, Table 3-7; the rule Python's
// bytes.decode(errors="replace") and Rust's String::from_utf8_lossy follow): each maximal
// prefix of a would-be sequence that cannot be completed becomes one U+FFFD.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mla::tok {

enum class Utf8Kind : uint8_t { VALID, INVALID, INCOMPLETE };

struct Utf8Step {
  Utf8Kind kind;
  size_t len;  // VALID: sequence length; INVALID: bytes in the maximal subpart (≥ 1);
               // INCOMPLETE: all n bytes are a proper prefix of a valid sequence
};

// Classifies the sequence that starts at s[0]; n ≥ 1.
Utf8Step utf8_step(const unsigned char* s, size_t n);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

bool utf8_is_valid(std::string_view bytes);
// Bytes → valid UTF-8: every maximal invalid subpart (and an incomplete tail) → U+FFFD.
std::string utf8_sanitize(std::string_view bytes);
// Appends to out the part of bytes that is decided; returns how many bytes were consumed.
// An incomplete sequence at the end is left unconsumed unless final is true.
size_t utf8_sanitize_append(std::string_view bytes, bool final, std::string& out);

}  // namespace mla::tok
