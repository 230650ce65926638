// tool_choice required / named as an xgrammar structural tag (see tool_choice.h).
#include "server/tool_choice.h"

#include <algorithm>
#include <optional>

#include "server/api_error.h"
#include "server/tool_parsers/formats.h"

namespace mla::server {
namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

json const_string(std::string_view s) { return {{"type", "const_string"}, {"value", s}}; }
json optional(json content) { return {{"type", "optional"}, {"content", std::move(content)}}; }
json sequence(json elements) {
  // xgrammar wants at least one element; a single one needs no sequence.
  if (elements.size() == 1) return std::move(elements[0]);
  return {{"type", "sequence"}, {"elements", std::move(elements)}};
}

// The name as the syntax writes it: raw, or as the inside of a JSON string.
std::string written_name(const CallSyntax& syn, const std::string& name) {
  if (!syn.json_name) return name;
  const std::string quoted = json(name).dump();
  return quoted.substr(1, quoted.size() - 2);
}

// The arguments of one tool: its `parameters` schema (an object of any shape when absent), in
// the syntax's style, with the format's markers kept out of its strings, unless the schema bounds
// a string's length: xgrammar drops such bounds when exclusions are given, and the schema wins.
json arguments_format(const CallSyntax& syn, const json& function, int max_whitespace,
                      const std::vector<std::string>& markers) {
  auto p = function.find("parameters");
  json schema = p == function.end() || p->is_null() ? json{{"type", "object"}} : *p;
  json f = {{"type", "json_schema"}, {"json_schema", std::move(schema)}, {"style", syn.args_style}};
  if (max_whitespace > 0) f["max_whitespace_cnt"] = max_whitespace;
  const std::string text = f["json_schema"].dump();
  if (text.find("\"minLength\"") != std::string::npos || text.find("\"maxLength\"") != std::string::npos) return f;
  json excludes = json::array();
  for (const auto& m : markers)
    if (m.find_first_of(" \n") == std::string::npos) excludes.push_back(m);  // xml styles refuse edge spaces
  f["excludes"] = std::move(excludes);
  return f;
}

bool only_keys(const json& schema, std::initializer_list<std::string_view> keys) {
  for (const auto& [k, v] : schema.items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) return false;
  return true;
}

// GLM's <arg_key>K</arg_key><arg_value>V</arg_value> pairs, each value exactly as GLM's template
// writes it: a string raw (any text without a marker, at most maxLength characters), any other
// value as JSON. xgrammar's glm_xml style lets whitespace pad a value, which the parser (as
// vLLM's) keeps in a string, so " Paris" could miss its enum: this form has no padding. The
// properties come in the schema's order, the required ones always; nullopt for a schema this
// cannot express exactly (then glm_xml is used).
std::optional<json> glm_pairs(const json& schema, int max_whitespace) {
  static const char* const kMarkers[] = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                                         "<arg_value>", "</arg_value>", "<think>",   "</think>"};
  if (!schema.is_object() ||
      !only_keys(schema, {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}))
    return std::nullopt;
  if (schema.contains("type") && schema["type"] != "object") return std::nullopt;
  const json props = schema.value("properties", json::object());
  const json required = schema.value("required", json::array());
  if (!props.is_object() || !required.is_array()) return std::nullopt;
  json pairs = json::array();
  for (const auto& [key, prop] : props.items()) {
    if (!prop.is_object() || key.find('<') != std::string::npos) return std::nullopt;
    json value;
    const json* en = prop.contains("enum") ? &prop["enum"] : nullptr;
    const json one = prop.contains("const") ? json::array({prop["const"]}) : json();
    if (!one.is_null()) en = &one;
    if (en) {
      if (!en->is_array() || en->empty()) return std::nullopt;
      json alts = json::array();
      for (const auto& v : *en) alts.push_back(const_string(v.is_string() ? v.get<std::string>() : v.dump()));
      value = alts.size() == 1 ? alts[0] : json{{"type", "or"}, {"elements", alts}};
    } else if (prop.value("type", json()) == "string") {
      if (!only_keys(prop, {"type", "description", "title", "maxLength"})) return std::nullopt;
      json excludes = json::array();
      for (const char* m : kMarkers) excludes.push_back(m);
      value = {{"type", "any_text"}, {"excludes", std::move(excludes)}};
      if (prop.contains("maxLength")) value["max_chars"] = prop["maxLength"];
    } else {
      // A value that is not always a string (the template writes strings raw, the rest as JSON).
      const json type = prop.value("type", json());
      if (!type.is_string() || type == "string") return std::nullopt;
      value = {{"type", "json_schema"}, {"json_schema", prop}};
      if (max_whitespace > 0) value["max_whitespace_cnt"] = max_whitespace;
    }
    json pair = sequence(json::array({optional(const_string("\n")), const_string("<arg_key>" + key + "</arg_key>"),
                                      optional(const_string("\n")), const_string("<arg_value>"), std::move(value),
                                      const_string("</arg_value>")}));
    const bool is_required = std::find(required.begin(), required.end(), json(key)) != required.end();
    pairs.push_back(is_required ? std::move(pair) : optional(std::move(pair)));
  }
  for (const auto& r : required)
    if (!r.is_string() || !props.contains(r.get<std::string>())) return std::nullopt;
  if (pairs.empty()) return optional(const_string("\n"));
  return sequence(std::move(pairs));
}

// One call of `function`: a tag whose begin holds the name and whose content is the arguments.
json call_tag(const CallSyntax& syn, const json& function, int max_whitespace,
              const std::vector<std::string>& markers) {
  const std::string name = function["name"].get<std::string>();
  json content = json::array();
  std::string begin = syn.call_begin + written_name(syn, name) + syn.name_end;
  if (!syn.index_pattern.empty()) {
    content.push_back({{"type", "regex"}, {"pattern", syn.index_pattern}});
    if (!syn.args_begin.empty()) content.push_back(const_string(syn.args_begin));
  } else {
    begin += syn.args_begin;
  }
  if (syn.args_newline_optional) content.push_back(optional(const_string("\n")));
  std::optional<json> pairs;
  if (syn.args_style == "glm_xml") {
    auto p = function.find("parameters");
    pairs = glm_pairs(p == function.end() || p->is_null() ? json{{"type", "object"}} : *p, max_whitespace);
  }
  content.push_back(pairs ? std::move(*pairs) : arguments_format(syn, function, max_whitespace, markers));
  if (syn.args_newline_optional) content.push_back(optional(const_string("\n")));
  return {{"type", "tag"}, {"begin", begin}, {"content", sequence(std::move(content))}, {"end", syn.call_end}};
}

json one_of(json alternatives) {
  if (alternatives.size() == 1) return std::move(alternatives[0]);
  return {{"type", "or"}, {"elements", std::move(alternatives)}};
}

}  // namespace

const ToolCallFormat& constrained_call_format(const ServerParsers& parsers) {
  static const std::unique_ptr<ToolCallFormat> hermes = make_hermes_format("hermes");
  return parsers.tool_format ? *parsers.tool_format : *hermes;
}

std::vector<std::string> constrained_call_markers(const ToolCallFormat& format) {
  const CallSyntax s = format.syntax();
  std::vector<std::string> out;
  for (const std::string* m :
       {&s.section_begin, &s.section_end, &s.separator, &s.call_begin, &s.name_end, &s.args_begin, &s.call_end})
    if (!m->empty()) out.push_back(*m);
  if (s.args_style == "glm_xml")
    for (const char* m : {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}) out.emplace_back(m);
  if (s.args_style == "deepseek_xml")
    for (const char* m : {"<｜DSML｜parameter name=\"", "</｜DSML｜parameter>"}) out.emplace_back(m);
  out.emplace_back(kThinkStart);
  out.emplace_back(kThinkEnd);
  return out;
}

GrammarSpec tool_call_grammar(const ToolCallFormat& format, const json& tools, const ChatToolOptions& opts,
                              bool reasoning_open, int max_whitespace) {
  const CallSyntax syn = format.syntax();
  // Marker texts kept out of argument strings: the ones that open or close a call or section.
  std::vector<std::string> markers;
  for (std::string_view m : format.start_markers()) markers.emplace_back(m);
  std::string end_marker = syn.call_end;
  while (!end_marker.empty() && end_marker.back() == '\n') end_marker.pop_back();
  if (!end_marker.empty() && syn.args_style != "json") markers.push_back(end_marker);

  json calls = json::array();
  for (const auto& t : tools) {
    const json& fn = t["function"];
    if (opts.choice == ToolChoice::kNamed && fn["name"] != opts.named) continue;
    calls.push_back(call_tag(syn, fn, max_whitespace, markers));
  }
  if (calls.empty()) bad_request("'tool_choice' leaves no function to call", "tool_choice");

  json body;
  if (opts.choice == ToolChoice::kNamed || !opts.parallel) {
    body = one_of(std::move(calls));
  } else {
    // One call, then any number of (separator, call).
    json more = json::array();
    if (!syn.separator.empty())
      more.push_back(syn.separator_optional ? optional(const_string(syn.separator)) : const_string(syn.separator));
    more.push_back(one_of(calls));
    body = sequence(json::array({one_of(calls), {{"type", "star"}, {"content", sequence(std::move(more))}}}));
  }
  json elements = json::array();
  if (reasoning_open) {
    // The reasoning: free text (a leading <think> included) up to </think>.
    json excludes = json::array();
    for (std::string_view m : format.start_markers()) excludes.push_back(m);
    elements.push_back({{"type", "tag"},
                        {"begin", ""},
                        {"content", {{"type", "any_text"}, {"excludes", std::move(excludes)}}},
                        {"end", kThinkEnd}});
  }
  // Up to two newlines before the calls (templates write "\n\n" after </think>).
  elements.push_back(optional(const_string("\n")));
  elements.push_back(optional(const_string("\n")));
  if (!syn.section_begin.empty()) elements.push_back(const_string(syn.section_begin));
  elements.push_back(std::move(body));
  if (!syn.section_end.empty()) elements.push_back(const_string(syn.section_end));
  const json tag = {{"type", "structural_tag"}, {"format", sequence(std::move(elements))}};
  return GrammarSpec::structural_tag(tag.dump());
}

}  // namespace mla::server
