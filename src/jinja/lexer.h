#pragma once
// Template source -> tokens, with jinja2's whitespace rules: "{%-"/"-%}" strip, "+%}"/"{%+"
// keep, trim_blocks drops the newline after a block or comment tag, lstrip_blocks drops the
// spaces before a block or comment tag that starts a line, one trailing newline of the template
// is dropped, every newline ("\r\n", "\r") becomes "\n", and {% raw %} bodies are plain data.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mla::jinja {

enum class TokenType : uint8_t {
  TokenType_data,         // template text
  TokenType_var_begin,    // {{
  TokenType_var_end,      // }}
  TokenType_block_begin,  // {%
  TokenType_block_end,    // %}
  TokenType_name,
  TokenType_string,   // text holds the decoded value
  TokenType_integer,  // int_value
  TokenType_float,    // float_value
  TokenType_op,       // text holds the operator: "+", "//", "(", ...
  TokenType_eof,
};

struct Token {
  TokenType type = TokenType::TokenType_eof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in code points
};

struct LexOptions {
  bool trim_blocks = true;  // transformers' chat-template environment sets both
  bool lstrip_blocks = true;
};

// Throws jinja::Error with line/column on malformed input (unterminated tags, comments, raw
// blocks or strings, unbalanced brackets, characters outside the expression grammar).
std::vector<Token> tokenize(std::string_view source, const LexOptions& opt = {});

// "'end of statement block'"-style description for parser messages.
std::string describe(const Token& t);

}  // namespace mla::jinja
