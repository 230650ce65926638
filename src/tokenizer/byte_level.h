#pragma once
// GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable code point, so that a
// byte-level BPE vocabulary can store arbitrary byte strings as UTF-8 text ("Ġ" = byte 0x20).
// Printable bytes 33..126, 161..172, 174..255 map to themselves; the other 68 bytes map, in byte
// order, to U+0100, U+0101, ...
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mla::tok {

// The code point that stands for byte b.
uint32_t byte_to_codepoint(uint8_t b);
// The byte that code point cp stands for, or nullopt when cp is not in the byte-level alphabet.
std::optional<uint8_t> codepoint_to_byte(uint32_t cp);

// Raw bytes → byte-level text (each byte becomes the UTF-8 encoding of its code point).
std::string byte_level_encode(std::string_view bytes);
// Byte-level text → raw bytes. Returns nullopt when the text is not valid UTF-8 or holds a code
// point outside the alphabet (such a token is then taken verbatim, as HF's ByteLevel decoder does).
std::optional<std::string> byte_level_decode(std::string_view text);

// Appends the UTF-8 encoding of cp (cp < 0x110000) to out.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace mla::tok
