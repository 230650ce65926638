#pragma once
// Tool calls in model output text: the formats of the models we serve, parsed incrementally.
//
// A format (ToolCallFormat) is a pure function from the text generated so far to the content
// outside calls and the calls seen, each with the part of its arguments that can no longer
// change. ToolCallStream runs a format over a growing text and hands out only what is new, as
// OpenAI's streaming shape wants it: content, then per call its id and name once, then argument
// fragments whose concatenation is the final arguments string.
//
// Formats (names as vLLM spells its --tool-call-parser):
//   glm45 / glm47   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
//   deepseek_v3     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                   ```json ARGS ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   deepseek_v31    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...
//   deepseek_v32    <｜DSML｜function_calls><｜DSML｜invoke name="N"><｜DSML｜parameter name="K"
//                   string="true|false">V</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>
//   deepseek_v4     the same inside <｜DSML｜tool_calls>...</｜DSML｜tool_calls>
//   kimi_k2         <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I
//                   <|tool_call_argument_begin|>ARGS<|tool_call_end|>...<|tool_calls_section_end|>
//   hermes          <tool_call>{"name": N, "arguments": {...}}</tool_call>   (Qwen3, Hermes)
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/json.h"

namespace mla::server {

// One call as the format reads it from the text so far.
struct ParsedCall {
  std::string id;    // from the text (Kimi's "functions.NAME:0"), else "" (one is made up)
  std::string name;  // valid once name_done
  bool name_done = false;
  std::string arguments;  // the stable prefix of the arguments JSON text; all of it once done
  bool done = false;      // the call's end marker was seen (or the text ended and it parsed)
};

struct ParsedText {
  std::string content;  // text outside calls (a held-back marker prefix excluded)
  std::vector<ParsedCall> calls;
};

// How a format writes its calls, for constraining output to calls (tool_choice "required" or a
// named function, server/tool_choice.h). The output is: section_begin, one or more calls joined
// by separator, section_end. One call: call_begin, the function's name (JSON-escaped when
// json_name), name_end, a call index matching index_pattern (when not ""), args_begin, the
// arguments as JSON text or in xgrammar's XML style args_style, call_end.
struct CallSyntax {
  std::string section_begin, section_end;
  std::string separator;
  bool separator_optional = false;  // the separator may be left out (GLM-4.5/4.6 vs 4.7/5 layouts)
  std::string call_begin, name_end, index_pattern, args_begin, call_end;
  bool json_name = false;
  std::string args_style = "json";     // "json", "glm_xml" (<arg_key>), "deepseek_xml" (DSML)
  bool args_newline_optional = false;  // a newline may precede the arguments and call_end
};

class ToolCallFormat {
 public:
  virtual ~ToolCallFormat() = default;
  virtual std::string_view name() const = 0;
  // text: the model's output so far (reasoning already removed). final: the output is complete:
  // nothing is held back, and a call that cannot be completed is dropped (its text stays
  // content). tools: the request's tools (null or a list), for argument types by schema.
  virtual ParsedText parse(std::string_view text, bool final, const json& tools) const = 0;
  // The markers that open a call section; text without any of them holds no call.
  virtual std::vector<std::string_view> start_markers() const = 0;
  // How the format writes calls (see CallSyntax).
  virtual CallSyntax syntax() const = 0;
};

// The format for a --tool-call-parser name; nullptr when unknown.
std::unique_ptr<ToolCallFormat> make_tool_call_format(std::string_view name);
// Every name make_tool_call_format knows, for help and errors.
std::vector<std::string> tool_call_format_names();
// The format a chat template writes tool calls in, judged from its source; "" when none known.
std::string detect_tool_call_format(std::string_view template_source);

// One streamed piece of a call: index, then id/name in the first piece, argument text after.
struct ToolCallDelta {
  int index = 0;
  std::string id;         // "" after the first piece
  std::string name;       // "" after the first piece
  std::string arguments;  // a fragment ("" in the first piece unless already known)
};

struct FinalToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text
};

// Runs a format over a growing text.
class ToolCallStream {
 public:
  ToolCallStream(const ToolCallFormat& format, json tools);
  // Appends text; new content goes to *content, new call pieces to *calls.
  void feed(std::string_view text, std::string* content, std::vector<ToolCallDelta>* calls);
  // The output is complete: flushes what was held back.
  void finish(std::string* content, std::vector<ToolCallDelta>* calls);
  // The whole output parsed at once (non-streaming): content and complete calls.
  static ParsedText parse_all(const ToolCallFormat& format, std::string_view text, const json& tools);
  bool any_call() const { return !sent_.empty(); }

 private:
  void update(bool final, std::string* content, std::vector<ToolCallDelta>* calls);
  struct Sent {
    std::string id;
    bool name_sent = false;
    size_t args_sent = 0;
  };
  const ToolCallFormat& format_;
  json tools_;
  std::string text_;
  size_t searched_ = 0;                   // text_ searched for a start marker up to here
  size_t marker_at_ = std::string::npos;  // the first start marker: the format parses from here
  size_t content_sent_ = 0;
  std::vector<Sent> sent_;
};

// An OpenAI-style call id: prefix + 24 random alphanumerics (also Anthropic's "msg_" ids).
std::string make_tool_call_id(std::string_view prefix = "call_");

// ---------------------------------------------------------------------------------------------
// Helpers shared by the formats (tool_parser.cpp).
namespace tool_format {

// Length of the longest suffix of text that is a proper prefix of one of the markers: text a
// streaming parser must hold back, since the next token may complete the marker.
size_t partial_marker_suffix(std::string_view text, const std::vector<std::string_view>& markers);

// The JSON Schema "properties" of the tool named `name` in an OpenAI tools list, or nullptr.
const json* tool_properties(const json& tools, std::string_view name);
// Whether `name` is one of the tools (true when tools is empty: nothing to check against).
bool tool_known(const json& tools, std::string_view name);

// A raw string value converted to its schema type as vLLM does (null, integer, number, boolean,
// object, array, then string, in that order of preference); without a type, the string.
nlohmann::ordered_json coerce_to_schema(const std::string& value, const json* schema);

// json.dumps(v, ensure_ascii=False) as Python writes it (", " and ": " separators).
std::string py_json_dumps(const nlohmann::ordered_json& v);

std::string_view trim(std::string_view s);

}  // namespace tool_format
}  // namespace mla::server
