// The tool-call stream, the format registry and template detection, and the helpers the
// formats share (see tool_parser.h).
#include "server/tool_parsers/tool_parser.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <random>

#include "server/api_error.h"
#include "server/json_limits.h"
#include "server/tool_parsers/formats.h"

namespace mla::server {

std::vector<std::string> tool_call_format_names() {
  return {"deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4",   "glm45",
          "glm47",       "hermes",       "kimi_k2",      "qwen3_xml_json"};
}

std::unique_ptr<ToolCallFormat> make_tool_call_format(std::string_view name) {
  if (name == "glm45" || name == "glm47") return make_glm_format(name);
  if (name == "deepseek_v3") return make_deepseek_v3_format();
  if (name == "deepseek_v31") return make_deepseek_v31_format();
  if (name == "deepseek_v32") return make_deepseek_v32_format();
  if (name == "deepseek_v4") return make_deepseek_v4_format();
  if (name == "kimi_k2") return make_kimi_k2_format();
  if (name == "hermes" || name == "qwen3_xml_json") return make_hermes_format(name);
  return nullptr;
}

std::string detect_tool_call_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<arg_key>") && has("<tool_call>")) return "glm45";
  // ｜DSML｜: V3.2 wraps calls in function_calls, V4 in tool_calls.
  if (has("\xef\xbd\x9c"
          "DSML"
          "\xef\xbd\x9c"))
    return has("function_calls") ? "deepseek_v32" : "deepseek_v4";
  if (has("<\xef\xbd\x9ctool\xe2\x96\x81"
          "calls\xe2\x96\x81"
          "begin\xef\xbd\x9c>"))
    return has("```json") ? "deepseek_v3" : "deepseek_v31";
  if (has("<|tool_calls_section_begin|>")) return "kimi_k2";
  if (has("<tool_call>")) return "hermes";
  return "";
}

std::string make_tool_call_id(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

ToolCallStream::ToolCallStream(const ToolCallFormat& format, json tools) : format_(format), tools_(std::move(tools)) {}

void ToolCallStream::feed(std::string_view text, std::string* content, std::vector<ToolCallDelta>* calls) {
  text_ += text;
  update(false, content, calls);
}

void ToolCallStream::finish(std::string* content, std::vector<ToolCallDelta>* calls) { update(true, content, calls); }

void ToolCallStream::update(bool final, std::string* content, std::vector<ToolCallDelta>* calls) {
  std::string_view all = text_;
  const auto markers = format_.start_markers();
  // Only the new text (and a marker's length before it) is searched: O(n) over a stream.
  if (marker_at_ == std::string_view::npos) {
    for (auto m : markers) {
      const size_t from = searched_ >= m.size() ? searched_ - m.size() + 1 : 0;
      marker_at_ = std::min(marker_at_, all.find(m, from));
    }
    searched_ = all.size();
  }
  // Text before the first marker is content; the format reads from the marker on, so a call
  // costs what the calls' text costs, however long the answer before it.
  std::string_view head = all;
  ParsedText p;
  if (marker_at_ == std::string_view::npos) {
    head = all.substr(0, all.size() - (final ? 0 : tool_format::partial_marker_suffix(all, markers)));
  } else {
    head = all.substr(0, marker_at_);
    p = format_.parse(all.substr(marker_at_), final, tools_);
  }
  // Content only grows; a format never takes back what it called content.
  if (content_sent_ < head.size()) {
    content->append(head.substr(content_sent_));
    content_sent_ = head.size();
  }
  const size_t sent_in_p = content_sent_ - head.size();
  if (p.content.size() > sent_in_p) {
    content->append(p.content, sent_in_p, std::string::npos);
    content_sent_ = head.size() + p.content.size();
  }
  for (size_t i = 0; i < p.calls.size(); ++i) {
    const ParsedCall& c = p.calls[i];
    if (!c.name_done) break;
    if (i >= sent_.size()) sent_.push_back({c.id.empty() ? make_tool_call_id() : c.id});
    Sent& s = sent_[i];
    ToolCallDelta d;
    d.index = static_cast<int>(i);
    if (!s.name_sent) {
      d.id = s.id;
      d.name = c.name;
      s.name_sent = true;
    }
    if (c.arguments.size() > s.args_sent) {
      d.arguments = c.arguments.substr(s.args_sent);
      s.args_sent = c.arguments.size();
    }
    if (!d.name.empty() || !d.arguments.empty()) calls->push_back(std::move(d));
  }
}

ParsedText ToolCallStream::parse_all(const ToolCallFormat& format, std::string_view text, const json& tools) {
  ParsedText p = format.parse(text, true, tools);
  std::erase_if(p.calls, [](const ParsedCall& c) { return !c.done || !c.name_done; });
  return p;
}

namespace tool_format {

size_t partial_marker_suffix(std::string_view text, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (auto m : markers) {
    const size_t max = std::min(text.size(), m.size() - 1);
    for (size_t k = max; k > best; --k)
      if (text.substr(text.size() - k) == m.substr(0, k)) {
        best = k;
        break;
      }
  }
  return best;
}

const json* tool_properties(const json& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const json* f = t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || string_or_empty(*f, "name") != name) continue;
    auto p = f->find("parameters");
    if (p == f->end() || !p->is_object()) return nullptr;
    auto props = p->find("properties");
    return props != p->end() && props->is_object() ? &*props : nullptr;
  }
  return nullptr;
}

bool tool_known(const json& tools, std::string_view name) {
  if (!tools.is_array() || tools.empty()) return true;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const json* f = t.contains("function") ? &t["function"] : &t;
    if (f->is_object() && string_or_empty(*f, "name") == name) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

using ojson = nlohmann::ordered_json;

namespace {

bool finite_json(const ojson& v) {
  if (v.is_number_float()) return std::isfinite(v.get<double>());
  if (v.is_array() || v.is_object())
    for (const auto& e : v)
      if (!finite_json(e)) return false;
  return true;
}

std::optional<ojson> parse_json_value(const std::string& s) {
  if (!json_depth_ok(s)) return std::nullopt;
  ojson v = ojson::parse(s, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !finite_json(v)) return std::nullopt;
  return v;
}

// Python's int(s): optional whitespace and sign, digits (underscores between digits allowed).
std::optional<ojson> py_int(const std::string& s) {
  std::string_view t = trim(s);
  std::string digits;
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  bool last_digit = false;
  for (; i < t.size(); ++i) {
    if (t[i] >= '0' && t[i] <= '9') {
      digits += t[i];
      last_digit = true;
    } else if (t[i] == '_' && last_digit && i + 1 < t.size()) {
      last_digit = false;
    } else {
      return std::nullopt;
    }
  }
  if (digits.empty() || !last_digit) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (errno == ERANGE) return std::nullopt;  // beyond int64: not representable here
  return ojson(neg ? -v : v);
}

std::optional<ojson> py_float(const std::string& s) {
  std::string_view t = trim(s);
  if (t.empty()) return std::nullopt;
  std::string str(t);
  for (char c : str)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;  // inf/nan and hex are not JSON numbers
  char* end = nullptr;
  const double d = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || !std::isfinite(d)) return std::nullopt;
  if (d == std::floor(d) && std::fabs(d) < 9.0e15) return ojson(static_cast<int64_t>(d));
  return ojson(d);
}

std::vector<std::string> schema_types(const json& schema) {
  std::vector<std::string> out;
  auto add = [&](const json& t) {
    if (!t.is_string()) return;
    std::string s = t.get<std::string>();
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    s = std::string(trim(s));
    if (s == "int")
      s = "integer";
    else if (s == "float" || s == "double")
      s = "number";
    else if (s == "bool")
      s = "boolean";
    else if (s == "str")
      s = "string";
    else if (s == "dict")
      s = "object";
    else if (s == "list")
      s = "array";
    out.push_back(s);
  };
  auto t = schema.find("type");
  if (t != schema.end()) {
    if (t->is_array())
      for (const auto& e : *t) add(e);
    else
      add(*t);
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    auto alts = schema.find(k);
    if (alts == schema.end() || !alts->is_array()) continue;
    for (const auto& alt : *alts)
      if (alt.is_object())
        for (auto& s : schema_types(alt)) out.push_back(s);
  }
  return out;
}

}  // namespace

ojson coerce_to_schema(const std::string& value, const json* schema) {
  if (!schema || !schema->is_object()) return value;
  const std::vector<std::string> types = schema_types(*schema);
  if (types.empty()) return value;
  auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
  if (has("null")) {
    std::string lower = value;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "null") return nullptr;
  }
  if (has("integer"))
    if (auto v = py_int(value)) return *v;
  if (has("number")) {
    if (auto v = py_int(value)) return *v;
    if (auto v = py_float(value)) return *v;
  }
  if (has("boolean")) {
    std::string lower(trim(value));
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "true" || lower == "1") return true;
    if (lower == "false" || lower == "0") return false;
  }
  if (has("object") || has("array"))
    if (auto v = parse_json_value(value)) return *v;
  if (has("string")) return value;
  if (auto v = parse_json_value(value)) return *v;
  return value;
}

std::string py_json_dumps(const ojson& v) {
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) s += ", ";
      first = false;
      s += ojson(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
      s += ": ";
      s += py_json_dumps(it.value());
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ", ";
      s += py_json_dumps(v[i]);
    }
    return s + "]";
  }
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace tool_format
}  // namespace mla::server
