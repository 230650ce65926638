#pragma once
// The request side of tool calling and reasoning for /v1/chat/completions (and /v1/messages):
// `tools` and `tool_choice` validated, assistant tool_calls made template-ready, and the
// per-request OutputParsing chosen from the server's parsers.
#include <memory>
#include <string>

#include "server/chat_output.h"

namespace mla::server {

// The server's parsers, chosen at start-up (--tool-call-parser / --reasoning-parser or from the
// chat template).
struct ServerParsers {
  std::shared_ptr<const ToolCallFormat> tool_format;  // nullptr: tool calls not parsed
  std::string reasoning_parser;                       // "": reasoning not split
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ChatToolOptions {
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;     // kNamed: the function
  bool parallel = true;  // parallel_tool_calls: kRequired may write more than one call
  bool requires_call() const { return choice == ToolChoice::kRequired || choice == ToolChoice::kNamed; }
};

// Checks `tools` (a list of {"type": "function", "function": {"name", "parameters"?, ...}}) and
// `tool_choice` ("auto" | "none" | "required" | {"type": "function", "function": {"name"}}) and
// `parallel_tool_calls` (a boolean); 400 naming the field otherwise. "required" and a named
// function are enforced by constrained decoding (tool_choice.h).
ChatToolOptions parse_tool_options(const json& body, const json& tools);

// Assistant messages made template-ready: tool_calls[].function.arguments given as JSON text
// become objects, as chat templates expect them (vLLM does the same), a null content next to
// tool_calls becomes "", and `reasoning` (vLLM's name) is copied to `reasoning_content`. 400
// when arguments are not a JSON object.
void prepare_assistant_messages(json& messages);

// What to parse out of this request's output. prompt: the rendered prompt. A request that must
// call a tool is parsed in constrained_call_format() (the server's parser, else hermes).
OutputParsing output_parsing(const ServerParsers& parsers, const json& tools, const ChatToolOptions& opts,
                             const json& chat_template_kwargs, std::string_view prompt);

}  // namespace mla::server
