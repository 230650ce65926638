#pragma once
// tool_choice "required" and a named function (OpenAI), tool_choice "any" and "tool" (Anthropic):
// the output is constrained to tool calls written in the served model's own tool-call syntax, so
// the format's parser reads them back as for any other call, each call's arguments valid against
// its tool's `parameters` schema (xgrammar structural tags; see docs/API.md).
//
// What the constraint covers when the request thinks (its output starts inside a <think> block,
// OutputParsing::reasoning_open): the reasoning stays free text up to </think>, as in vLLM, where
// a structured-output grammar starts only once the reasoning has ended; after </think> (and at
// most two newlines) the calls must follow. Tool-call markers are not allowed inside the
// reasoning, so a call cannot begin there unconstrained.
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server/chat_tools.h"

namespace mla::server {

// The format that writes and reads constrained calls: the server's tool-call parser, or, on a
// server without one, the JSON-in-tags (hermes) syntax, which any model can be made to write.
const ToolCallFormat& constrained_call_format(const ServerParsers& parsers);

// The grammar for a request whose tool_choice requires calls (opts.choice kRequired or kNamed):
// kRequired: one or more calls of the request's tools (exactly one when !opts.parallel);
// kNamed: exactly one call of opts.named. max_whitespace: the longest run of free whitespace
// inside JSON arguments (0: no limit).
GrammarSpec tool_call_grammar(const ToolCallFormat& format, const json& tools, const ChatToolOptions& opts,
                              bool reasoning_open, int max_whitespace);

// The texts a constrained call may write as one special token: every marker of the format's
// CallSyntax, and <think> / </think>. A vocabulary's CONTROL tokens with one of these texts (as
// DeepSeek's and Kimi's markers are) must stay allowed in constrained text (grammar_vocab).
std::vector<std::string> constrained_call_markers(const ToolCallFormat& format);

}  // namespace mla::server
