// tools / tool_choice validation and the per-request parsing choice (see chat_tools.h).
#include "server/chat_tools.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/json_limits.h"
#include "server/tool_choice.h"

namespace mla::server {

ChatToolOptions parse_tool_options(const json& body, const json& tools) {
  ChatToolOptions o;
  if (tools.is_array()) {
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      if (!t.is_object() || (t.contains("type") && string_or_empty(t, "type") != "function"))
        bad_request(fmt::format("tools[{}] must be an object with \"type\": \"function\"", i), "tools");
      auto f = t.find("function");
      if (f == t.end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string() ||
          (*f)["name"].get<std::string>().empty())
        bad_request(fmt::format("tools[{}].function must be an object with a non-empty 'name'", i), "tools");
      auto p = f->find("parameters");
      if (p != f->end() && !p->is_null() && !p->is_object())
        bad_request(fmt::format("tools[{}].function.parameters must be a JSON Schema object", i), "tools");
    }
  }
  const bool have_tools = tools.is_array() && !tools.empty();
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null()) {
    o.choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  } else if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "auto")
      o.choice = ToolChoice::kAuto;
    else if (s == "none")
      o.choice = ToolChoice::kNone;
    else if (s == "required")
      o.choice = ToolChoice::kRequired;
    else
      bad_request(fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or a named "
                              "function, got \"{}\"",
                              s),
                  "tool_choice");
  } else if (tc->is_object()) {
    auto f = tc->find("function");
    if (string_or_empty(*tc, "type") != "function" || f == tc->end() || !f->is_object() || !f->contains("name") ||
        !(*f)["name"].is_string())
      bad_request(
          "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}",
          "tool_choice");
    o.choice = ToolChoice::kNamed;
    o.named = (*f)["name"].get<std::string>();
    if (!tool_format::tool_known(tools, o.named) || !have_tools)
      bad_request(fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", o.named),
                  "tool_choice");
  } else {
    bad_request(fmt::format("'tool_choice' must be a string or an object, got {}", tc->type_name()), "tool_choice");
  }
  if (o.choice == ToolChoice::kRequired && !have_tools)
    bad_request("'tool_choice' \"required\" needs a non-empty 'tools' list", "tool_choice");
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean())
      bad_request(fmt::format("'parallel_tool_calls' must be a boolean, got {}", p->type_name()),
                  "parallel_tool_calls");
    o.parallel = p->get<bool>();
  }
  return o;
}

void prepare_assistant_messages(json& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    json& m = messages[i];
    if (string_or_empty(m, "role") != "assistant") continue;
    // vLLM's newer name for the reasoning; templates read reasoning_content.
    // (json objects keep their keys in a vector: a reference into m dies when m gains a key, so
    // values are copied before inserting and tool_calls is looked up after.)
    if (m.contains("reasoning") && m["reasoning"].is_string() && !m.contains("reasoning_content")) {
      json reasoning = m["reasoning"];
      m["reasoning_content"] = std::move(reasoning);
    }
    if (!m.contains("tool_calls") || m["tool_calls"].is_null()) continue;
    // Templates test the content as text ('</think>' in content): null becomes "".
    if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
    auto calls = m.find("tool_calls");
    if (!calls->is_array()) bad_request(fmt::format("messages[{}].tool_calls must be a list", i), "messages");
    for (size_t k = 0; k < calls->size(); ++k) {
      json& c = (*calls)[k];
      auto f = c.is_object() ? c.find("function") : c.end();
      if (f == c.end() || !f->is_object() || !f->contains("name"))
        bad_request(fmt::format("messages[{}].tool_calls[{}] has no function name", i, k), "messages");
      auto a = f->find("arguments");
      if (a == f->end() || a->is_null() || (a->is_string() && a->get<std::string>().empty())) {
        (*f)["arguments"] = json::object();
      } else if (a->is_string()) {
        const std::string& text = a->get_ref<const std::string&>();
        json parsed = json_depth_ok(text) ? json::parse(text, nullptr, false) : json(json::value_t::discarded);
        if (parsed.is_discarded() || !parsed.is_object())
          bad_request(fmt::format("messages[{}].tool_calls[{}].function.arguments is not a JSON "
                                  "object",
                                  i, k),
                      "messages");
        *a = std::move(parsed);
      }
    }
  }
}

OutputParsing output_parsing(const ServerParsers& parsers, const json& tools, const ChatToolOptions& opts,
                             const json& kwargs, std::string_view prompt) {
  OutputParsing p;
  const bool have_tools = tools.is_array() && !tools.empty();
  // A call that must be made is written (and read) in the fallback syntax when the server has
  // no parser of its own.
  if ((parsers.tool_format || opts.requires_call()) && have_tools && opts.choice != ToolChoice::kNone) {
    p.tool_format = &constrained_call_format(parsers);
    p.tools = tools;
  }
  if (!parsers.reasoning_parser.empty()) {
    p.reasoning_open = reasoning_starts_open(parsers.reasoning_parser, kwargs, prompt);
    p.reasoning_breaks = reasoning_breaks_at_tool_calls(parsers.reasoning_parser);
    p.reasoning_trim = reasoning_trims_end(parsers.reasoning_parser);
  }
  return p;
}

}  // namespace mla::server
