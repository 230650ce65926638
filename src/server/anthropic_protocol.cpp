// The Anthropic Messages API request side (see anthropic_protocol.h).
#include "server/anthropic_protocol.h"

#include <fmt/format.h>

#include <limits>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/json.h"

namespace mla::server {
namespace {

// Anthropic's names: no _error suffix on 413, "overloaded_error" for 503, "api_error" for other 5xx.
const char* anthropic_error_type(int status) {
  static constexpr ErrorTypeName kTypes[] = {
      {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
      {404, "not_found_error"},       {413, "request_too_large"},    {429, "rate_limit_error"},
      {503, "overloaded_error"},
  };
  return error_type_lookup(kTypes, status, "invalid_request_error", "api_error");
}

[[noreturn]] void wrong_type(const std::string& name, const char* expected, const json& v) {
  bad_request(fmt::format("'{}' must be {}, got {}", name, expected, v.type_name()), name, "invalid_type");
}

// Text of a content value that may only hold text: a string or a list of text blocks.
std::string text_of(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(where, "a string or a list of text blocks", content);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    if (string_or_empty(b, "type") != "text" || !b.contains("text") || !b["text"].is_string())
      bad_request(fmt::format("{}[{}] must be a text block (other block types are not supported "
                              "here)",
                              where, i),
                  where);
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

// One Anthropic message → chat-template messages (a user turn may become tool messages first).
void convert_message(const json& m, size_t i, json& out) {
  const std::string where = fmt::format("messages[{}]", i);
  if (!m.is_object()) wrong_type(where, "an object", m);
  if (const json* r = field(m, "role"); r && !r->is_string()) wrong_type(where + ".role", "a string", *r);
  const std::string role = string_or_empty(m, "role");
  if (role != "user" && role != "assistant")
    bad_request(fmt::format("{}.role must be \"user\" or \"assistant\", got \"{}\"", where, role), "messages");
  const json* content = field(m, "content");
  if (!content) bad_request(fmt::format("{}.content is required", where), "messages");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) wrong_type(where + ".content", "a string or a list of blocks", *content);
  std::string text, thinking;
  json tool_calls = json::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const json& b = (*content)[k];
    const std::string bw = fmt::format("{}.content[{}]", where, k);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      bad_request(fmt::format("{} must be a block with a 'type'", bw), "messages");
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        bad_request(fmt::format("{} has no 'text' string", bw), "messages");
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string())
        bad_request(fmt::format("{} (tool_use) needs 'id' and 'name' strings", bw), "messages");
      const json* input = field(b, "input");
      if (input && !input->is_object()) wrong_type(bw + ".input", "an object", *input);
      tool_calls.push_back({{"id", b["id"]},
                            {"type", "function"},
                            {"function", {{"name", b["name"]}, {"arguments", input ? *input : json::object()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        bad_request(fmt::format("{} (tool_result) needs a 'tool_use_id' string", bw), "messages");
      const json* c = field(b, "content");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", b["tool_use_id"]},
                     {"content", c ? text_of(*c, bw + ".content") : std::string()}});
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      if (type == "thinking" && b.contains("thinking") && b["thinking"].is_string())
        thinking += b["thinking"].get<std::string>();
    } else {
      bad_request(fmt::format("{}: block type '{}' is not supported in a {} message", bw, type, role), "messages",
                  "unsupported");
    }
  }
  if (role == "user") {
    if (!text.empty() || out.empty() || string_or_empty(out.back(), "role") != "tool")
      out.push_back({{"role", "user"}, {"content", text}});
    return;
  }
  json msg = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!tool_calls.empty()) msg["tool_calls"] = std::move(tool_calls);
  out.push_back(std::move(msg));
}

json convert_tools(const json& tools) {
  if (!tools.is_array()) wrong_type("tools", "a list", tools);
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      bad_request(fmt::format("tools[{}] must be an object with a 'name'", i), "tools");
    if (t.contains("type") && t["type"].is_string() && t["type"] != "custom")
      bad_request(fmt::format("tools[{}]: server tool type '{}' is not supported (client tools "
                              "with an input_schema only)",
                              i, t["type"].get<std::string>()),
                  "tools", "unsupported");
    const json* schema = field(t, "input_schema");
    if (!schema || !schema->is_object())
      bad_request(fmt::format("tools[{}].input_schema must be a JSON Schema object", i), "tools");
    json fn = {{"name", t["name"]}};
    if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

}  // namespace

json anthropic_error_json(const ApiError& e) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status())}, {"message", e.what()}}}};
}

namespace {

// tool_choice {"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}
// → the OpenAI tool_choice it means, checked against tools.
ChatToolOptions parse_tool_choice(const json& body, const json& tools) {
  json openai_choice;
  const json* tc = field(body, "tool_choice");
  if (tc) {
    if (!tc->is_object() || !tc->contains("type") || !(*tc)["type"].is_string())
      bad_request("'tool_choice' must be an object with a 'type'", "tool_choice");
    const std::string type = (*tc)["type"].get<std::string>();
    if (type == "auto" || type == "none")
      openai_choice = type;
    else if (type == "any")
      openai_choice = "required";
    else if (type == "tool") {
      if (const json* n = field(*tc, "name"); n && !n->is_string()) wrong_type("tool_choice.name", "a string", *n);
      openai_choice = {{"type", "function"}, {"function", {{"name", string_or_empty(*tc, "name")}}}};
    } else
      bad_request(fmt::format("'tool_choice.type' must be auto, any, tool or none, got '{}'", type), "tool_choice");
  }
  json choice_body = {{"tool_choice", openai_choice}};
  if (tc && tc->contains("disable_parallel_tool_use")) {
    const json& d = (*tc)["disable_parallel_tool_use"];
    if (!d.is_boolean()) wrong_type("tool_choice.disable_parallel_tool_use", "a boolean", d);
    choice_body["parallel_tool_calls"] = !d.get<bool>();
  }
  return parse_tool_options(choice_body, tools);
}

// thinking {"type", "budget_tokens"?} → the template's thinking switches in kwargs.
void parse_thinking(const json& body, json& kwargs) {
  const json* th = field(body, "thinking");
  if (!th) return;
  if (!th->is_object()) wrong_type("thinking", "an object", *th);
  // "adaptive" / "between_tools" leave the choice to the model: thinking on, as "enabled".
  // budget_tokens is checked but not enforced (the model stops thinking when it does).
  const std::string type = string_or_empty(*th, "type");
  if (type != "enabled" && type != "disabled" && type != "adaptive" && type != "between_tools")
    bad_request(
        "'thinking.type' must be \"enabled\", \"disabled\", \"adaptive\" or "
        "\"between_tools\"",
        "thinking");
  if (type == "enabled") {
    const json* budget = field(*th, "budget_tokens");
    if (!budget || !budget->is_number_integer() || budget->get<int64_t>() < 1)
      bad_request("'thinking.budget_tokens' must be an integer >= 1", "thinking");
  }
  kwargs["enable_thinking"] = type != "disabled";
  kwargs["thinking"] = type != "disabled";
}

// max_tokens (required), temperature, top_p, top_k, stop_sequences.
void parse_sampling(const json& body, SamplingParams& p) {
  const json* mt = field(body, "max_tokens");
  if (!mt) bad_request("'max_tokens' is required", "max_tokens", "missing_field");
  if (!mt->is_number_integer() || mt->get<int64_t>() < 1 || mt->get<int64_t>() > std::numeric_limits<int32_t>::max())
    bad_request("'max_tokens' must be an integer >= 1", "max_tokens");
  p.max_tokens = static_cast<int>(mt->get<int64_t>());
  p.temperature = 1.0f;  // Anthropic's default
  if (const json* t = field(body, "temperature")) {
    if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1)
      bad_request("'temperature' must be a number in [0, 1]", "temperature");
    p.temperature = t->get<float>();
  }
  if (const json* t = field(body, "top_p")) {
    if (!t->is_number() || t->get<double>() <= 0 || t->get<double>() > 1)
      bad_request("'top_p' must be a number in (0, 1]", "top_p");
    p.top_p = t->get<float>();
  }
  if (const json* t = field(body, "top_k")) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad_request("'top_k' must be an integer >= 0", "top_k");
    p.top_k = static_cast<int>(t->get<int64_t>());
  }
  if (const json* st = field(body, "stop_sequences")) {
    if (!st->is_array()) wrong_type("stop_sequences", "a list of strings", *st);
    for (const auto& s : *st) {
      if (!s.is_string() || s.get<std::string>().empty())
        bad_request("'stop_sequences' must be non-empty strings", "stop_sequences");
      p.stop.push_back(s.get<std::string>());
    }
  }
}

// Claude Code (2.1.x) opens its system prompt with a line "x-anthropic-billing-header:
// cc_version=...; cc_entrypoint=...; cch=<hash>;" whose hash changes with every request. It means
// nothing to the model, and at the start of the prompt it would keep the prefix cache from
// matching anything after it; every such line is dropped (with its line break).
std::string without_billing_header(std::string text) {
  static constexpr std::string_view kHeader = "x-anthropic-billing-header:";
  for (size_t at = 0; at < text.size();) {
    const size_t eol = text.find('\n', at);
    const size_t next = eol == std::string::npos ? text.size() : eol + 1;
    if (std::string_view(text).substr(at).starts_with(kHeader)) {
      text.erase(at, next - at);
      continue;
    }
    at = next;
  }
  return text;
}

}  // namespace

AnthropicRequest parse_anthropic_request(const json& body, const ModelLimits& lim, bool count_only) {
  AnthropicRequest r;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) wrong_type("model", "a string", *m);
    r.model = m->get<std::string>();
  }
  if (const json* sys = field(body, "system"))
    r.messages.push_back({{"role", "system"}, {"content", without_billing_header(text_of(*sys, "system"))}});
  const json* msgs = field(body, "messages");
  if (!msgs) bad_request("'messages' is required", "messages", "missing_field");
  if (!msgs->is_array()) wrong_type("messages", "a list of messages", *msgs);
  if (msgs->empty()) bad_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) convert_message((*msgs)[i], i, r.messages);
  r.continue_final_message = string_or_empty(msgs->back(), "role") == "assistant";
  if (const json* t = field(body, "tools")) r.tools = convert_tools(*t);
  r.tool_options = parse_tool_choice(body, r.tools);
  parse_thinking(body, r.chat_template_kwargs);
  if (count_only) return r;
  parse_sampling(body, r.params);
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) wrong_type("stream", "a boolean", *s);
    r.stream = s->get<bool>();
  }
  (void)lim;
  return r;
}

}  // namespace mla::server
