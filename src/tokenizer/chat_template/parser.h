#pragma once
// Tokens -> statement tree, with jinja2's grammar and operator precedence (lowest first):
//   a if c else b | or | and | not | comparisons (==, !=, <, <=, >, >=, in, not in; chained)
//   | + - | ~ | * / // % | ** (left-assoc) | unary - + | postfix . [] () | filters | and tests `is`.
// Supported tags: if/elif/else, for (with else, loop filter, tuple targets), set (plain, tuple,
// namespace attribute, block form with optional filter), macro, call, filter, with, raw, print,
// break/continue (loopcontrols) and generation (transformers' AssistantTracker). Template
// inheritance and includes (block, extends, include, import, from) are errors.
#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/lexer.h"

namespace mla::jinja {

// Throws jinja::Error with line/column for syntax errors, unknown tags and (outside if-statements
// and conditional expressions, as jinja2 does at compile time) unknown filters and tests.
Body parse(const std::vector<Token>& tokens);

}  // namespace mla::jinja
