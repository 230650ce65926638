// The Responses API request side (see responses_protocol.h).
#include "server/responses_protocol.h"

#include <fmt/format.h>

#include <limits>

#include "server/api_error.h"

namespace mla::server {
namespace {

[[noreturn]] void wrong_type(const std::string& where, const char* expected, const json& v, const std::string& param) {
  bad_request(fmt::format("'{}' must be {}, got {}", where, expected, v.type_name()), param, "invalid_type");
}

// The text of a message's content: a string, or a list of input_text / output_text parts
// (joined with "\n"). Images, files and audio are refused: the models served read text only.
std::string content_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(where, "a string or a list of content parts", content, "input");
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string type = part.is_object() ? string_or_empty(part, "type") : "";
    if (type != "input_text" && type != "output_text" && type != "text")
      bad_request(fmt::format("{}[{}]: content part type '{}' is not supported (input_text and output_text only)",
                              where, k, type),
                  "input", "unsupported");
    const json* text = field(part, "text");
    if (!text || !text->is_string()) bad_request(fmt::format("{}[{}] has no 'text' string", where, k), "input");
    if (!out.empty()) out += "\n";
    out += text->get<std::string>();
  }
  return out;
}

// The assistant message that the next reasoning / assistant text / function_call of the same
// turn joins: the last message when it is the assistant's and has not yet got what `part` adds.
json& assistant_turn(json& messages, const char* part) {
  if (!messages.empty()) {
    json& last = messages.back();
    const bool has_calls = last.contains("tool_calls");
    const bool has_text = !string_or_empty(last, "content").empty();
    const std::string p = part;
    bool joins = string_or_empty(last, "role") == "assistant";
    if (p == "reasoning") joins = joins && !last.contains("reasoning_content") && !has_text && !has_calls;
    if (p == "text") joins = joins && !has_text && !has_calls;
    if (joins) return last;
  }
  messages.push_back({{"role", "assistant"}, {"content", ""}});
  return messages.back();
}

std::string required_string(const json& item, const char* name, const std::string& where) {
  const json* v = field(item, name);
  if (!v || !v->is_string()) bad_request(fmt::format("{} needs a '{}' string", where, name), "input");
  return v->get<std::string>();
}

// One input item → chat messages appended to `messages`.
void convert_item(const json& item, size_t i, json& messages) {
  const std::string where = fmt::format("input[{}]", i);
  if (!item.is_object()) wrong_type(where, "an object", item, "input");
  if (const json* t = field(item, "type"); t && !t->is_string()) wrong_type(where + ".type", "a string", *t, "input");
  // An item without a type is a message (EasyInputMessage).
  const std::string type = item.contains("type") ? string_or_empty(item, "type") : "message";
  if (type == "message") {
    const std::string role = string_or_empty(item, "role");
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      bad_request(fmt::format("{}.role must be user, assistant, system or developer, got '{}'", where, role), "input");
    const json* content = field(item, "content");
    if (!content) bad_request(fmt::format("{}.content is required", where), "input");
    std::string text = content_text(*content, where + ".content");
    if (role == "assistant")
      assistant_turn(messages, "text")["content"] = std::move(text);
    else
      messages.push_back({{"role", role}, {"content", std::move(text)}});
  } else if (type == "function_call") {
    const std::string call_id = required_string(item, "call_id", where);
    const std::string name = required_string(item, "name", where);
    const std::string arguments = required_string(item, "arguments", where);
    json& turn = assistant_turn(messages, "call");
    if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
    turn["tool_calls"].push_back(
        {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
  } else if (type == "function_call_output") {
    const std::string call_id = required_string(item, "call_id", where);
    const json* output = field(item, "output");
    if (!output) bad_request(fmt::format("{} needs an 'output'", where), "input");
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(*output, where + ".output")}});
  } else if (type == "reasoning") {
    // The reasoning text is in content (reasoning_text parts) or, failing that, the summary.
    std::string text;
    for (const char* key : {"content", "summary"}) {
      const json* parts = field(item, key);
      if (!parts || !text.empty()) continue;
      if (!parts->is_array()) wrong_type(fmt::format("{}.{}", where, key), "a list", *parts, "input");
      for (const json& p : *parts)
        if (p.is_object() && p.contains("text") && p["text"].is_string()) text += p["text"].get<std::string>();
    }
    if (!text.empty()) assistant_turn(messages, "reasoning")["reasoning_content"] = std::move(text);
  } else {
    bad_request(fmt::format("{}: item type '{}' is not supported (message, function_call, "
                            "function_call_output and reasoning are)",
                            where, type),
                "input", "unsupported");
  }
}

json convert_input(const json& body) {
  json messages = json::array();
  if (const json* ins = field(body, "instructions")) {
    if (!ins->is_string()) wrong_type("instructions", "a string", *ins, "instructions");
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  const json* input = field(body, "input");
  if (!input) bad_request("'input' is required", "input", "missing_field");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) convert_item((*input)[i], i, messages);
  } else {
    wrong_type("input", "a string or a list of items", *input, "input");
  }
  if (messages.empty() || (messages.size() == 1 && field(body, "instructions")))
    bad_request("'input' must not be empty", "input");
  return messages;
}

// Function tools {"type": "function", "name", "description"?, "parameters"?, "strict"?} → the
// chat shape {"type": "function", "function": {...}}.
json convert_tools(const json& tools) {
  if (!tools.is_array()) wrong_type("tools", "a list", tools, "tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object()) wrong_type(fmt::format("tools[{}]", i), "an object", t, "tools");
    const std::string type = string_or_empty(t, "type");
    if (type != "function")
      bad_request(fmt::format("tools[{}]: tool type '{}' is not supported (function tools only)", i, type), "tools",
                  "unsupported");
    json fn = json::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (const json* v = field(t, key)) fn[key] = *v;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// The function tools as the response lists them: as sent, with the `parameters` and `strict` the
// spec requires there (null when the request left them out). convert_tools has checked them.
json echoed_tools(const json* tools) {
  json out = json::array();
  if (!tools) return out;
  for (json t : *tools) {
    if (!t.contains("parameters")) t["parameters"] = nullptr;
    if (!t.contains("strict")) t["strict"] = nullptr;
    out.push_back(std::move(t));
  }
  return out;
}

// tool_choice: "auto" | "none" | "required" | {"type": "function", "name"} → the chat shape.
json convert_tool_choice(const json& tc) {
  if (tc.is_string()) return tc;
  if (!tc.is_object()) wrong_type("tool_choice", "a string or an object", tc, "tool_choice");
  if (string_or_empty(tc, "type") != "function")
    bad_request(fmt::format("'tool_choice.type' '{}' is not supported (function only)", string_or_empty(tc, "type")),
                "tool_choice", "unsupported");
  if (const json* n = field(tc, "name"); n && !n->is_string())
    wrong_type("tool_choice.name", "a string", *n, "tool_choice");
  return {{"type", "function"}, {"function", {{"name", string_or_empty(tc, "name")}}}};
}

// text.format: {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "name",
// "schema", "strict"?} → response_format (null: free text).
json convert_text_format(const json& text) {
  if (!text.is_object()) wrong_type("text", "an object", text, "text");
  const json* format = field(text, "format");
  if (!format) return nullptr;
  if (!format->is_object()) wrong_type("text.format", "an object", *format, "text.format");
  const std::string type = string_or_empty(*format, "type");
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type != "json_schema")
    bad_request(fmt::format("'text.format.type' must be text, json_object or json_schema, got '{}'", type),
                "text.format", "unsupported");
  const json* schema = field(*format, "schema");
  if (!schema || !schema->is_object())
    bad_request("'text.format.schema' must be a JSON Schema object", "text.format", "invalid_type");
  json js = {{"name", string_or_empty(*format, "name")}, {"schema", *schema}};
  if (const json* strict = field(*format, "strict")) {
    if (!strict->is_boolean()) wrong_type("text.format.strict", "a boolean", *strict, "text.format");
    js["strict"] = *strict;
  }
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

// reasoning {"effort"?, "summary"?}: effort "none" turns the template's thinking off, any other
// effort on (and reaches the template as reasoning_effort); no effort leaves the template's default.
json convert_reasoning(const json& reasoning) {
  if (!reasoning.is_object()) wrong_type("reasoning", "an object", reasoning, "reasoning");
  json kwargs = json::object();
  const json* effort = field(reasoning, "effort");
  if (!effort) return kwargs;
  const std::string e = effort->is_string() ? effort->get<std::string>() : "";
  if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high")
    bad_request("'reasoning.effort' must be none, minimal, low, medium or high", "reasoning");
  kwargs["enable_thinking"] = e != "none";
  kwargs["thinking"] = e != "none";
  kwargs["reasoning_effort"] = e;
  return kwargs;
}

}  // namespace

ResponsesRequest parse_responses_request(const json& body) {
  ResponsesRequest r;
  if (const json* prev = field(body, "previous_response_id"))
    bad_request(fmt::format("'previous_response_id': response '{}' not found (this server stores no responses: send "
                            "the whole conversation in 'input')",
                            prev->is_string() ? prev->get<std::string>() : prev->dump()),
                "previous_response_id", "not_found");
  for (const char* unsupported : {"background", "conversation", "prompt"})
    if (const json* v = field(body, unsupported); v && *v != json(false))
      bad_request(fmt::format("'{}' is not supported", unsupported), unsupported, "unsupported");
  if (const json* s = field(body, "store"); s && !s->is_boolean()) wrong_type("store", "a boolean", *s, "store");
  json& chat = r.chat_body;
  chat = json::object();
  chat["messages"] = convert_input(body);
  // Fields with the same name and meaning in both APIs (their errors name them as sent).
  for (const char* same : {"model", "temperature", "top_p", "parallel_tool_calls", "stream", "user"})
    if (const json* v = field(body, same)) chat[same] = *v;
  if (const json* mt = field(body, "max_output_tokens")) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1 || mt->get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad_request("'max_output_tokens' must be an integer >= 1", "max_output_tokens");
    chat["max_completion_tokens"] = *mt;
  }
  if (const json* t = field(body, "tools")) chat["tools"] = convert_tools(*t);
  if (const json* tc = field(body, "tool_choice")) chat["tool_choice"] = convert_tool_choice(*tc);
  if (const json* t = field(body, "text"))
    if (json rf = convert_text_format(*t); !rf.is_null()) chat["response_format"] = std::move(rf);
  if (const json* re = field(body, "reasoning")) chat["chat_template_kwargs"] = convert_reasoning(*re);
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) wrong_type("stream", "a boolean", *s, "stream");
    r.stream = s->get<bool>();
  }
  json& echo = r.echo;
  auto given = [&](const char* name, const json& fallback) {
    const json* v = field(body, name);
    echo[name] = v ? *v : fallback;
  };
  given("instructions", nullptr);
  given("max_output_tokens", nullptr);
  given("metadata", json::object());
  given("parallel_tool_calls", true);
  given("reasoning", {{"effort", nullptr}, {"summary", nullptr}});
  given("temperature", 1.0);
  given("text", {{"format", {{"type", "text"}}}});
  given("tool_choice", "auto");
  echo["tools"] = echoed_tools(field(body, "tools"));
  given("top_p", 1.0);
  given("truncation", "disabled");
  if (const json* user = field(body, "user")) echo["user"] = *user;  // a string in the spec: absent, not null
  echo["previous_response_id"] = nullptr;
  echo["store"] = false;
  return r;
}

}  // namespace mla::server
