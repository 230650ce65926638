#pragma once
// The parser's view of the token list (parser.cpp): the current token, one of lookahead, and the
// checks that throw jinja::Error at a token's line and column.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace mla::jinja {

class TokenCursor {
 public:
  explicit TokenCursor(const std::vector<Token>& tokens) : toks_(tokens) {}

 protected:
  const std::vector<Token>& toks_;  // ends with an eof token
  size_t i_ = 0;

  const Token& cur() const { return toks_[i_]; }
  const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (t.type != TokenType::TokenType_eof) ++i_;
    return t;
  }
  static Pos pos_of(const Token& t) { return Pos{t.line, t.column}; }
  Pos pos() const { return pos_of(cur()); }

  [[noreturn]] void fail(const std::string& msg, Pos p) const { throw Error(msg, p.line, p.column); }
  [[noreturn]] void fail(const std::string& msg) const { fail(msg, pos()); }

  bool is_op(std::string_view op) const { return cur().type == TokenType::TokenType_op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::TokenType_name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected(fmt::format("'{}'", op));
  }
  const Token& expect(TokenType type, const char* what) {
    if (cur().type != type) unexpected(what);
    return next();
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    if (cur().type == TokenType::TokenType_eof) fail(fmt::format("unexpected end of template, expected {}", expected));
    fail(fmt::format("expected {}, got '{}'", expected, describe(cur())));
  }
};

}  // namespace mla::jinja
