#include "jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "jinja/pystr.h"
#include "jinja/value.h"

namespace mla::jinja {
namespace {

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_ascii_digit(c); }

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opt) : s_(std::move(src)), opt_(opt) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < s_.size(); ++i)
      if (s_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < s_.size()) pos = lex_root(pos);
    Token eof;
    eof.type = TokenType::TokenType_eof;
    set_pos(eof, s_.size());
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  std::string s_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;

  void set_pos(Token& t, size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_start = *(it - 1);
    t.line = static_cast<int>(it - line_starts_.begin());
    t.column = static_cast<int>(py::length(std::string_view(s_).substr(line_start, offset - line_start))) + 1;
  }

  [[noreturn]] void fail(size_t offset, const std::string& msg) const {
    Token t;
    set_pos(t, offset);
    throw Error(msg, t.line, t.column);
  }

  // Length of the Python whitespace character at i, or 0.
  size_t space_at(size_t i) const {
    if (i >= s_.size()) return 0;
    auto b = static_cast<unsigned char>(s_[i]);
    if (b < 0x80) return py::is_space(b) ? 1 : 0;
    size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    if (i + n > s_.size()) return 0;
    std::u32string u = py::decode(std::string_view(s_).substr(i, n));
    return u.size() == 1 && py::is_space(u[0]) ? n : 0;
  }
  size_t skip_space(size_t i) const {
    while (size_t n = space_at(i)) i += n;
    return i;
  }
  bool at(size_t i, std::string_view lit) const { return std::string_view(s_).substr(i, lit.size()) == lit; }

  void emit(TokenType type, size_t offset, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    set_pos(t, offset);
    out_.push_back(std::move(t));
  }

  // Text before a tag, after the tag's whitespace control: '-' strips all trailing whitespace;
  // otherwise, for block/comment tags with lstrip_blocks, spaces between the line start and the tag.
  void emit_data(size_t begin, size_t end, char sign, bool lstrip_applies) {
    std::string_view text = std::string_view(s_).substr(begin, end - begin);
    if (sign == '-') {
      std::string stripped = py::strip(text, std::nullopt, false, true);
      text = text.substr(0, stripped.size());
    } else if (sign != '+' && lstrip_applies && opt_.lstrip_blocks) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      bool line_starting = begin == 0 || s_[begin - 1] == '\n';
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_space(begin + l_pos) == end)
        text = text.substr(0, l_pos);
    }
    if (!text.empty()) emit(TokenType::TokenType_data, begin, std::string(text));
  }

  // After a block-style end delimiter at i (length len) with sign: returns the next position.
  size_t after_block_end(size_t i, size_t len, char sign) const {
    size_t p = i + len;
    if (sign == '-') return skip_space(p);
    if (sign != '+' && opt_.trim_blocks && p < s_.size() && s_[p] == '\n') return p + 1;
    return p;
  }

  size_t lex_root(size_t pos) {
    size_t i = pos;
    while (true) {
      i = s_.find('{', i);
      if (i == std::string::npos || i + 1 >= s_.size()) {
        emit_data(pos, s_.size(), 0, false);
        return s_.size();
      }
      char k = s_[i + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++i;
    }
    char kind = s_[i + 1];
    char sign = (i + 2 < s_.size() && (s_[i + 2] == '-' || s_[i + 2] == '+')) ? s_[i + 2] : 0;
    size_t body = i + 2 + (sign ? 1 : 0);
    emit_data(pos, i, sign, kind != '{');
    if (kind == '#') return lex_comment(i, body);
    if (kind == '%') {
      size_t raw_end = match_raw_begin(body);
      if (raw_end) return lex_raw(i, raw_end);
    }
    return lex_tag(i, body, kind == '%');
  }

  // "\s*raw\s*(-%}\s*|%})" at p; returns the end position or 0.
  size_t match_raw_begin(size_t p) const {
    p = skip_space(p);
    if (!at(p, "raw")) return 0;
    p = skip_space(p + 3);
    if (at(p, "-%}")) return skip_space(p + 3);
    if (at(p, "%}")) return p + 2;
    return 0;
  }

  size_t lex_comment(size_t start, size_t body) {
    size_t k = s_.find("#}", body);
    if (k == std::string::npos) fail(start, "missing end of comment tag '#}'");
    char sign = (k > body && (s_[k - 1] == '-' || s_[k - 1] == '+')) ? s_[k - 1] : 0;
    size_t end_start = sign ? k - 1 : k;
    return after_block_end(end_start, sign ? 3 : 2, sign);
  }

  size_t lex_raw(size_t start, size_t body) {
    size_t i = body;
    while (true) {
      i = s_.find("{%", i);
      if (i == std::string::npos) fail(start, "missing end of raw directive ({% endraw %})");
      char sign = (i + 2 < s_.size() && (s_[i + 2] == '-' || s_[i + 2] == '+')) ? s_[i + 2] : 0;
      size_t p = skip_space(i + 2 + (sign ? 1 : 0));
      if (at(p, "endraw")) {
        p = skip_space(p + 6);
        char end_sign = (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ? s_[p] : 0;
        if (at(p + (end_sign ? 1 : 0), "%}")) {
          emit_data(body, i, sign, true);
          return after_block_end(p, end_sign ? 3 : 2, end_sign);
        }
      }
      i += 2;
    }
  }

  size_t lex_tag(size_t start, size_t p, bool block) {
    emit(block ? TokenType::TokenType_block_begin : TokenType::TokenType_var_begin, start);
    std::vector<char> balance;
    while (true) {
      if (p >= s_.size()) fail(start, block ? "missing end of statement tag '%}'" : "missing end of print tag '}}'");
      if (balance.empty()) {
        if (block) {
          if (at(p, "+%}") || at(p, "-%}") || at(p, "%}")) {
            char sign = s_[p] == '%' ? 0 : s_[p];
            emit(TokenType::TokenType_block_end, p);
            return after_block_end(p, sign ? 3 : 2, sign);
          }
        } else {
          if (at(p, "-}}")) {
            emit(TokenType::TokenType_var_end, p);
            return skip_space(p + 3);
          }
          if (at(p, "}}")) {
            emit(TokenType::TokenType_var_end, p);
            return p + 2;
          }
        }
      }
      if (size_t q = skip_space(p); q != p) {
        p = q;
        continue;
      }
      if (size_t q = match_float(p)) {
        p = q;
        continue;
      }
      if (size_t q = match_integer(p)) {
        p = q;
        continue;
      }
      char c = s_[p];
      if (is_name_start(c)) {
        size_t q = p;
        while (q < s_.size() && is_name_char(s_[q])) ++q;
        emit(TokenType::TokenType_name, p, s_.substr(p, q - p));
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        if (size_t q = lex_string(p)) {
          p = q;
          continue;
        }
      }
      p = lex_operator(p, balance);
    }
  }

  // Digits with single underscores between them: (\d+_)*\d+. Returns end or 0.
  size_t match_digits(size_t p) const {
    if (p >= s_.size() || !is_ascii_digit(s_[p])) return 0;
    while (true) {
      while (p < s_.size() && is_ascii_digit(s_[p])) ++p;
      if (p + 1 < s_.size() && s_[p] == '_' && is_ascii_digit(s_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  static std::string without_underscores(std::string_view t) {
    std::string out;
    for (char c : t)
      if (c != '_') out.push_back(c);
    return out;
  }

  size_t match_float(size_t p) {
    if (p > 0 && s_[p - 1] == '.') return 0;
    size_t q = match_digits(p);
    if (!q) return 0;
    size_t frac_end = 0;
    if (q < s_.size() && s_[q] == '.') frac_end = match_digits(q + 1);
    size_t after = frac_end ? frac_end : q;
    size_t end = 0;
    if (after < s_.size() && (s_[after] == 'e' || s_[after] == 'E')) {
      size_t e = after + 1;
      if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      end = match_digits(e);
    }
    if (!end) end = frac_end;
    if (!end) return 0;
    std::string text = without_underscores(std::string_view(s_).substr(p, end - p));
    Token t;
    t.type = TokenType::TokenType_float;
    t.float_value = std::strtod(text.c_str(), nullptr);
    t.text = text;
    set_pos(t, p);
    out_.push_back(std::move(t));
    return end;
  }

  size_t match_integer(size_t p) {
    if (p >= s_.size() || !is_ascii_digit(s_[p])) return 0;
    int base = 10;
    size_t q = p;
    auto digit_ok = [&](char c) {
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 16) return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      return is_ascii_digit(c);
    };
    // (_?d)+ after a prefix; returns end or 0 if no digit follows.
    auto digits_after = [&](size_t r, bool need_one) -> size_t {
      size_t n = 0;
      while (true) {
        if (r < s_.size() && digit_ok(s_[r])) {
          ++r;
          ++n;
        } else if (r + 1 < s_.size() && s_[r] == '_' && digit_ok(s_[r + 1])) {
          r += 2;
          ++n;
        } else {
          break;
        }
      }
      return (need_one && n == 0) ? 0 : r;
    };
    if (s_[p] == '0' && p + 1 < s_.size() && std::string_view("bBoOxX").find(s_[p + 1]) != std::string_view::npos) {
      char k = static_cast<char>(s_[p + 1] | 0x20);
      base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
      q = digits_after(p + 2, true);
      if (!q) {
        base = 10;
        q = p + 1;  // just "0"
      }
    } else if (s_[p] == '0') {
      // 0(_?0)*
      q = p + 1;
      while (true) {
        if (q < s_.size() && s_[q] == '0')
          ++q;
        else if (q + 1 < s_.size() && s_[q] == '_' && s_[q + 1] == '0')
          q += 2;
        else
          break;
      }
    } else {
      q = digits_after(p + 1, false);
    }
    std::string text = without_underscores(std::string_view(s_).substr(p, q - p));
    std::string digits = base == 10 ? text : text.substr(2);
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(digits.c_str(), &end, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()))
      fail(p, fmt::format("integer literal {} is out of the 64-bit range", text));
    Token t;
    t.type = TokenType::TokenType_integer;
    t.int_value = static_cast<int64_t>(v);
    t.text = text;
    set_pos(t, p);
    out_.push_back(std::move(t));
    return q;
  }

  static int hex_value(char c) {
    if (is_ascii_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A quoted string at p, decoded with Python's unicode-escape rules. Returns end or 0 if the
  // closing quote is missing (then the quote is reported as an unexpected character).
  size_t lex_string(size_t p) {
    char quote = s_[p];
    size_t q = p + 1;
    while (q < s_.size() && s_[q] != quote) q += s_[q] == '\\' ? 2 : 1;
    if (q >= s_.size()) return 0;
    std::string_view raw = std::string_view(s_).substr(p + 1, q - p - 1);
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      char c = raw[i];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      char e = raw[++i];
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            int h = i + 1 + k < raw.size() ? hex_value(raw[i + 1 + k]) : -1;
            if (h < 0) fail(p, fmt::format("truncated \\{} escape in string literal", e));
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          if (cp > 0x10FFFF) fail(p, "illegal Unicode character in string literal");
          py::append_utf8(out, cp);
          i += n;
          break;
        }
        case 'N':
          fail(p, "\\N{...} escapes are not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k)
              cp = cp * 8 + static_cast<char32_t>(raw[++i] - '0');
            py::append_utf8(out, cp);
          } else {
            out.push_back('\\');  // unknown escapes stay as written
            out.push_back(e);
          }
      }
    }
    emit(TokenType::TokenType_string, p, std::move(out));
    return q + 1;
  }

  size_t lex_operator(size_t p, std::vector<char>& balance) {
    static constexpr std::string_view k_two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : k_two) {
      if (at(p, op)) {
        emit(TokenType::TokenType_op, p, std::string(op));
        return p + 2;
      }
    }
    char c = s_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t n = 1;
      auto b = static_cast<unsigned char>(c);
      if (b >= 0x80) n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
      fail(p, fmt::format("unexpected char '{}'", s_.substr(p, n)));
    }
    if (c == '(') balance.push_back(')');
    if (c == '[') balance.push_back(']');
    if (c == '{') balance.push_back('}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(p, fmt::format("unexpected '{}'", c));
      char expected = balance.back();
      balance.pop_back();
      if (expected != c) fail(p, fmt::format("unexpected '{}', expected '{}'", c, expected));
    }
    emit(TokenType::TokenType_op, p, std::string(1, c));
    return p + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& opt) {
  size_t bad = 0;
  if (!py::valid_utf8(source, &bad)) throw Error(fmt::format("template is not valid UTF-8 (byte offset {})", bad));
  // Newlines become "\n" and one trailing newline goes (keep_trailing_newline=False).
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s), opt).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::TokenType_data:
      return "template data / text";
    case TokenType::TokenType_var_begin:
      return "begin of print statement";
    case TokenType::TokenType_var_end:
      return "end of print statement";
    case TokenType::TokenType_block_begin:
      return "begin of statement block";
    case TokenType::TokenType_block_end:
      return "end of statement block";
    case TokenType::TokenType_name:
      return t.text;
    case TokenType::TokenType_string:
      return "string";
    case TokenType::TokenType_integer:
      return "integer";
    case TokenType::TokenType_float:
      return "float";
    case TokenType::TokenType_op:
      return t.text;
    case TokenType::TokenType_eof:
      return "end of template";
  }
  return "token";
}

}  // namespace mla::jinja
