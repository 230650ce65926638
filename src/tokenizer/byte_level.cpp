#include "tokenizer/byte_level.h"

#include <array>

namespace mla::tok {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // code points of the alphabet are all < 0x144

  ByteTables() {
    from_cp.fill(-1);
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next_extra++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

std::optional<uint8_t> codepoint_to_byte(uint32_t cp) {
  if (cp >= 512) return std::nullopt;
  int16_t b = tables().from_cp[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_codepoint(b));
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  // Every alphabet code point is below U+0800, so only 1- and 2-byte UTF-8 forms can occur.
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    auto c0 = static_cast<unsigned char>(text[i]);
    uint32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && c0 >= 0xC2 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;
    }
    auto b = codepoint_to_byte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace mla::tok
