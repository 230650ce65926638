#include "jinja/pystr.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

namespace mla::jinja::py {

// ---- UTF-8 ----------------------------------------------------------------------------------

namespace {

// Length of the UTF-8 sequence starting at s[i] if it is well formed, else 0.
size_t sequence_length(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  size_t n;
  char32_t c;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    c = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    c = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    c = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    auto cb = static_cast<unsigned char>(s[i + k]);
    if ((cb & 0xC0) != 0x80) return 0;
    c = (c << 6) | (cb & 0x3F);
  }
  // Overlong forms and values past U+10FFFF are malformed. Surrogates are accepted: Python str can
  // hold them (e.g. from a "\ud800" escape) and we carry them through unchanged.
  if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF))) return 0;
  return n;
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t n = sequence_length(s, i);
    if (n == 0) {
      out.push_back(static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    auto b = static_cast<unsigned char>(s[i]);
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(c);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char ch : s)
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++n;
  return n;
}

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n = sequence_length(s, i);
    if (n == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += n;
  }
  return true;
}

// ---- character classes ------------------------------------------------------------------------

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;  // C1 controls, NBSP (Zs), soft hyphen (Cf)
  struct Range {
    char32_t lo, hi;
  };
  // Zs, Zl, Zp, Cf, Cs, Co and noncharacters.
  static constexpr Range k_not_printable[] = {
      {0x0600, 0x0605},   {0x061C, 0x061C},   {0x06DD, 0x06DD},   {0x070F, 0x070F},   {0x0890, 0x0891},
      {0x08E2, 0x08E2},   {0x1680, 0x1680},   {0x180E, 0x180E},   {0x2000, 0x200F},   {0x2028, 0x202F},
      {0x205F, 0x2064},   {0x2066, 0x206F},   {0x3000, 0x3000},   {0xD800, 0xF8FF},   {0xFDD0, 0xFDEF},
      {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0xFFFE, 0xFFFF},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
      {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0000, 0xE007F}, {0xF0000, 0x10FFFF},
  };
  for (const auto& r : k_not_printable)
    if (c >= r.lo && c <= r.hi) return false;
  if ((c & 0xFFFE) == 0xFFFE) return false;  // U+xFFFE / U+xFFFF in every plane
  return true;
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

namespace {

// Simple one-to-one case pairs: {upper, lower}. Ranges with alternating even/odd pairs are
// generated in the lookups below.
bool in_alternating_pairs(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

struct CasePair {
  char32_t upper, lower;
};

constexpr CasePair k_case_singles[] = {
    {0x0178, 0x00FF}, {0x0386, 0x03AC}, {0x038C, 0x03CC}, {0x038E, 0x03CD}, {0x038F, 0x03CE},
    {0x04C0, 0x04CF}, {0x039C, 0x00B5}, {0x0049, 0x0131}, {0x0053, 0x017F}, {0x03A3, 0x03C2},
};

// Pair ranges where the upper-case letter has the given parity within [lo, hi].
struct ParityRange {
  char32_t lo, hi;
  int upper_parity;  // 0: upper is even, 1: upper is odd
};
constexpr ParityRange k_parity_ranges[] = {
    {0x0100, 0x012F, 0}, {0x0132, 0x0137, 0}, {0x0139, 0x0148, 1}, {0x014A, 0x0177, 0}, {0x0179, 0x017E, 1},
    {0x0460, 0x0481, 0}, {0x048A, 0x04BF, 0}, {0x04C1, 0x04CE, 1}, {0x04D0, 0x052F, 0},
};

// Offset blocks: upper in [lo, hi], lower = upper + delta.
struct OffsetRange {
  char32_t lo, hi;
  int delta;
};
constexpr OffsetRange k_offset_ranges[] = {
    {'A', 'Z', 32},       {0x00C0, 0x00D6, 32}, {0x00D8, 0x00DE, 32}, {0x0388, 0x038A, 37},
    {0x0391, 0x03A1, 32}, {0x03A3, 0x03A9, 32}, {0x0400, 0x040F, 80}, {0x0410, 0x042F, 32},
};

}  // namespace

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  for (const auto& r : k_offset_ranges)
    if (c >= r.lo && c <= r.hi) return c + r.delta;
  for (const auto& r : k_parity_ranges)
    if (in_alternating_pairs(c, r.lo, r.hi) && static_cast<int>(c & 1) == r.upper_parity) return c + 1;
  if (c == 0x0178) return 0x00FF;
  for (const auto& p : {CasePair{0x0386, 0x03AC}, CasePair{0x038C, 0x03CC}, CasePair{0x038E, 0x03CD},
                        CasePair{0x038F, 0x03CE}, CasePair{0x04C0, 0x04CF}})
    if (c == p.upper) return p.lower;
  return c;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  for (const auto& r : k_offset_ranges)
    if (c >= r.lo + r.delta && c <= r.hi + r.delta) return c - r.delta;
  for (const auto& r : k_parity_ranges)
    if (in_alternating_pairs(c, r.lo, r.hi) && static_cast<int>(c & 1) != r.upper_parity &&
        in_alternating_pairs(c - 1, r.lo, r.hi))
      return c - 1;
  for (const auto& p : k_case_singles)
    if (c == p.lower) return p.upper;
  return c;
}

bool is_cased_upper(char32_t c) { return to_lower(c) != c || c == 0x0130; }
bool is_cased_lower(char32_t c) { return to_upper(c) != c || c == 0x00DF || c == 0x0149; }

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (is_cased_upper(c) || is_cased_lower(c)) return true;
  if (c == 0xAA || c == 0xBA || c == 0x0138) return true;
  return (c >= 0x0180 && c <= 0x024F) || (c >= 0x0250 && c <= 0x02AF) || (c >= 0x05D0 && c <= 0x05EA) ||
         (c >= 0x0620 && c <= 0x064A) || (c >= 0x0E01 && c <= 0x0E30) || (c >= 0x3041 && c <= 0x3096) ||
         (c >= 0x30A1 && c <= 0x30FA) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x20000 && c <= 0x3134F);
}

bool is_word(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  if (is_space(c) || !is_printable(c)) return false;
  if (c <= 0xBF)
    return c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA || (c >= 0xBC && c <= 0xBE);
  if (c == 0xD7 || c == 0xF7) return false;
  struct Range {
    char32_t lo, hi;
  };
  // Punctuation and symbol blocks: general punctuation, currency, arrows, maths, box drawing,
  // shapes, dingbats, CJK and full-width punctuation, emoji.
  static constexpr Range k_symbols[] = {
      {0x2010, 0x2027}, {0x2030, 0x205E}, {0x20A0, 0x20CF}, {0x2190, 0x23FF}, {0x2500, 0x27BF},
      {0x2900, 0x2BFF}, {0x3001, 0x3004}, {0x3008, 0x3020}, {0x30FB, 0x30FB}, {0xFE30, 0xFE4F},
      {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20}, {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0x1F000, 0x1FAFF},
  };
  for (const auto& r : k_symbols)
    if (c >= r.lo && c <= r.hi) return false;
  return true;
}

// ---- case conversion --------------------------------------------------------------------------

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) {
    if (c == 0x00DF) {
      out += "SS";
      continue;
    }
    append_utf8(out, to_upper(c));
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) {
    if (c == 0x0130) {  // 'İ'.lower() == 'i̇'
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, to_lower(c));
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::u32string u = decode(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0 && u[i] == 0x00DF)
      out += "Ss";  // titlecase of 'ß'
    else if (i == 0)
      append_utf8(out, to_upper(u[i]));
    else
      append_utf8(out, to_lower(u[i]));
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : decode(s)) {
    bool cased = is_cased_upper(c) || is_cased_lower(c);
    if (cased && !prev_cased && c == 0x00DF)
      out += "Ss";  // titlecase of 'ß'
    else if (cased)
      append_utf8(out, prev_cased ? to_lower(c) : to_upper(c));
    else
      append_utf8(out, c);
    prev_cased = cased;
  }
  return out;
}

std::string swapcase(std::string_view s) {
  std::string out;
  for (char32_t c : decode(s)) {
    if (is_cased_upper(c))
      append_utf8(out, to_lower(c));
    else if (is_cased_lower(c))
      append_utf8(out, to_upper(c));
    else
      append_utf8(out, c);
  }
  return out;
}

// ---- strip / split / replace ------------------------------------------------------------------

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string{};
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strippable(u[b])) ++b;
  if (right)
    while (e > b && strippable(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode(std::u32string_view(u).substr(i)));  // the rest keeps its trailing spaces
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string u = decode(s);
  size_t e = u.size();
  while (true) {
    while (e > 0 && is_space(u[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode(std::u32string_view(u).substr(0, e)));  // the rest keeps its leading spaces
      break;
    }
    size_t j = e;
    while (j > 0 && !is_space(u[j - 1])) --j;
    out.push_back(encode(std::u32string_view(u).substr(j, e - j)));
    e = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t brk_len = (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    size_t end = keepends ? i + brk_len : i;
    out.push_back(encode(std::u32string_view(u).substr(start, end - start)));
    i += brk_len;
    start = i;
  }
  if (start < u.size()) out.push_back(encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count) {
  std::string out;
  if (old_s.empty()) {
    // Python inserts new_s before every code point and at the end.
    std::u32string u = decode(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += new_s;
        ++n;
      }
      append_utf8(out, c);
    }
    if (count < 0 || n < count) out += new_s;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t hit = s.find(old_s, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_s);
    pos = hit + old_s.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

// ---- find / count / startswith ----------------------------------------------------------------

void adjust_range(int64_t n, std::optional<int64_t>& start, std::optional<int64_t>& end) {
  int64_t b = start.value_or(0), e = end.value_or(n);
  if (b < 0) b = std::max<int64_t>(0, b + n);
  if (e < 0) e = std::max<int64_t>(0, e + n);
  start = std::min(b, n);
  end = std::min(e, n);
}

int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool reverse) {
  std::u32string u = decode(s), v = decode(sub);
  adjust_range(static_cast<int64_t>(u.size()), start, end);
  int64_t b = *start, e = *end;
  int64_t m = static_cast<int64_t>(v.size());
  if (e - b < m) return -1;
  if (!reverse) {
    for (int64_t i = b; i + m <= e; ++i)
      if (std::u32string_view(u).substr(i, m) == v) return i;
  } else {
    for (int64_t i = e - m; i >= b; --i)
      if (std::u32string_view(u).substr(i, m) == v) return i;
  }
  return -1;
}

int64_t count(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end) {
  std::u32string u = decode(s), v = decode(sub);
  adjust_range(static_cast<int64_t>(u.size()), start, end);
  int64_t b = *start, e = *end;
  if (e < b) return 0;
  int64_t m = static_cast<int64_t>(v.size());
  if (m == 0) return e - b + 1;
  int64_t n = 0;
  for (int64_t i = b; i + m <= e;) {
    if (std::u32string_view(u).substr(i, m) == v) {
      ++n;
      i += m;
    } else {
      ++i;
    }
  }
  return n;
}

bool startswith(std::string_view s, std::string_view prefix, std::optional<int64_t> start, std::optional<int64_t> end,
                bool at_end) {
  std::u32string u = decode(s), p = decode(prefix);
  adjust_range(static_cast<int64_t>(u.size()), start, end);
  int64_t b = *start, e = *end;
  int64_t m = static_cast<int64_t>(p.size());
  if (e - b < m) return false;
  int64_t at = at_end ? e - m : b;
  return std::u32string_view(u).substr(at, m) == p;
}

int64_t digits_value(std::string_view digits) {
  int64_t v = 0;
  for (char c : digits)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v)) return INT64_MAX;
  return v;
}

// ---- repr -------------------------------------------------------------------------------------

std::string repr(std::string_view s) {
  std::u32string u = decode(s);
  bool has_single = u.find(U'\'') != std::u32string::npos;
  bool has_double = u.find(U'"') != std::u32string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {  // NOLINT(bugprone-branch-clone): also \\x below, after the printables
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x7F || is_printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
  return out;
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: "d[.ddd]e[+-]xx".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mantissa = sci.substr(0, epos);
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char ch : mantissa)
    if (ch != '.') digits.push_back(ch);
  // CPython repr: value = 0.DIGITS * 10^decpt; fixed notation when -4 < decpt <= 16.
  int decpt = exp10 + 1;
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out;
}

}  // namespace mla::jinja::py
