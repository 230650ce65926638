#pragma once
// Tokens -> statement tree, with jinja2's grammar and operator precedence (lowest first):
//   a if c else b | or | and | not | comparisons (==, !=, <, <=, >, >=, in, not in; chained)
//   | + - | ~ | * / // % | ** (left-assoc) | unary - + | postfix . [] () | filters | and tests `is`.
// Supported tags: if/elif/else, for (with else, loop filter, tuple targets), set (plain, tuple,
// namespace attribute, block form with optional filter), macro, call, filter, with, raw, print,
// break/continue (loopcontrols) and generation (transformers' AssistantTracker). Template
// inheritance and includes (block, extends, include, import, from) are errors.
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace mla::jinja {

// Throws jinja::Error with line/column for syntax errors, unknown tags and (outside if-statements
// and conditional expressions, as jinja2 does at compile time) unknown filters and tests.
Body parse(const std::vector<Token>& tokens);

// Post-parse passes (parser_checks.cpp): the unknown-filter/test rule above, and which of
// caller/kwargs/varargs a macro body reads (that decides what extra arguments it accepts).
void validate_filters(const Body& body);
void find_special_names(MacroStmt& m);
// Names that start undefined at the top level instead of coming from the context (see
// RootNames in parser_checks.cpp for jinja2's rule).
std::vector<std::string> root_assigned_first(const Body& body);

}  // namespace mla::jinja
