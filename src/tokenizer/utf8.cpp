#include "tokenizer/utf8.h"

namespace mla::tok {

Utf8Step utf8_step(const unsigned char* s, size_t n) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return {Utf8Kind::VALID, 1};
  size_t need;                 // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;   // no overlong forms
    if (b0 == 0xED) hi = 0x9F;   // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;   // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;   // nothing above U+10FFFF
  } else {
    return {Utf8Kind::INVALID, 1};  // 80..BF, C0, C1, F5..FF never start a sequence
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= n) return {Utf8Kind::INCOMPLETE, n};
    const unsigned char b = s[k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {Utf8Kind::INVALID, k};
  }
  return {Utf8Kind::VALID, need + 1};
}

bool utf8_is_valid(std::string_view bytes) {
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    Utf8Step st = utf8_step(p + i, bytes.size() - i);
    if (st.kind != Utf8Kind::VALID) return false;
    i += st.len;
  }
  return true;
}

size_t utf8_sanitize_append(std::string_view bytes, bool final, std::string& out) {
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, run = 0;  // [run, i) is valid text not yet copied
  while (i < bytes.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    Utf8Step st = utf8_step(p + i, bytes.size() - i);
    if (st.kind == Utf8Kind::VALID) {
      i += st.len;
      continue;
    }
    out.append(bytes.data() + run, i - run);
    if (st.kind == Utf8Kind::INCOMPLETE && !final) return i;
    out.append(kReplacementChar);
    i += st.len;
    run = i;
  }
  out.append(bytes.data() + run, i - run);
  return i;
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  utf8_sanitize_append(bytes, true, out);
  return out;
}

}  // namespace mla::tok
