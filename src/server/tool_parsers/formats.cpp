// The tool-call formats. Each is a layout (the markers around a section of calls and around each
// call) read by one scanner, plus a reader for the body of one call.
#include "server/tool_parsers/formats.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/json_limits.h"

namespace mla::server {
namespace {

using tool_format::partial_marker_suffix;
using tool_format::trim;
using ojson = nlohmann::ordered_json;

// The markers every CallSyntax has (the rest is set by the format that needs it).
CallSyntax call_syntax(std::string_view section_begin, std::string_view section_end, std::string_view call_begin,
                       std::string_view name_end, std::string_view call_end) {
  CallSyntax s;
  s.section_begin = section_begin;
  s.section_end = section_end;
  s.call_begin = call_begin;
  s.name_end = name_end;
  s.call_end = call_end;
  return s;
}

// Markers; section_begin empty: calls stand alone in the content. begin_variants: other
// spellings that also open a section (closed by the same section_end). end_of_turn: the first
// closed section ends the output; text after it is not content (vLLM's deepseek_v4).
struct Layout {
  std::string_view section_begin, section_end, call_begin, call_end;
  std::vector<std::string_view> begin_variants = {};
  bool end_of_turn = false;
  std::vector<std::string_view> starts() const {
    std::vector<std::string_view> out{section_begin.empty() ? call_begin : section_begin};
    out.insert(out.end(), begin_variants.begin(), begin_variants.end());
    return out;
  }
};

// The first of the markers in text from pos: its position (npos if none) and length.
std::pair<size_t, size_t> find_first_of_markers(std::string_view text, size_t pos,
                                                const std::vector<std::string_view>& markers) {
  std::pair<size_t, size_t> best{std::string_view::npos, 0};
  for (auto m : markers) {
    const size_t at = text.find(m, pos);
    if (at < best.first || (at == best.first && at != std::string_view::npos && m.size() > best.second))
      best = {at, m.size()};
  }
  return best;
}

struct CallSpan {
  std::string_view body;
  bool closed = false;  // call_end seen
};

struct Scan {
  std::string content;
  std::vector<CallSpan> calls;
};

// Text outside calls. After the first call, text that is only whitespace (the newlines between
// calls) is not content; while streaming, such text at the end waits until more text comes.
void append_content(Scan& out, std::string_view text) {
  if (!out.calls.empty() && trim(text).empty()) return;
  out.content.append(text);
}

// Splits text into content and call bodies. Not final: a suffix that may still become a marker
// is held back (neither content nor body).
Scan scan_calls(std::string_view text, const Layout& L, bool final) {
  Scan out;
  const std::vector<std::string_view> starts = L.starts();
  size_t pos = 0;
  bool in_section = false;
  while (pos <= text.size()) {
    if (!in_section) {
      const auto [at, len] = find_first_of_markers(text, pos, starts);
      if (at == std::string_view::npos) {
        std::string_view rest = text.substr(pos);
        const size_t hold = final ? 0 : partial_marker_suffix(rest, starts);
        append_content(out, rest.substr(0, rest.size() - hold));
        break;
      }
      append_content(out, text.substr(pos, at - pos));
      pos = at + len;
      if (!L.section_begin.empty()) {
        in_section = true;
        continue;
      }
    } else {
      // Inside a section: the next call, or the section's end.
      const size_t call = text.find(L.call_begin, pos);
      const size_t end = text.find(L.section_end, pos);
      if (end != std::string_view::npos && (call == std::string_view::npos || end < call)) {
        if (L.end_of_turn) break;
        in_section = false;
        pos = end + L.section_end.size();
        continue;
      }
      if (call == std::string_view::npos) break;  // text between calls is not content
      pos = call + L.call_begin.size();
    }
    // A call body runs to call_end.
    const size_t end = text.find(L.call_end, pos);
    if (end == std::string_view::npos) {
      std::string_view body = text.substr(pos);
      const size_t hold = final ? 0 : partial_marker_suffix(body, {L.call_end});
      out.calls.push_back({body.substr(0, body.size() - hold), false});
      break;
    }
    out.calls.push_back({text.substr(pos, end - pos), true});
    pos = end + L.call_end.size();
  }
  return out;
}

// A format = layout + body reader. read_body fills name/arguments/done from one call body;
// `closed` says whether the call's end marker was seen, `final` whether the output is complete.
class ScannedFormat : public ToolCallFormat {
 public:
  ScannedFormat(std::string_view name, Layout layout) : name_(name), layout_(layout) {}
  std::string_view name() const override { return name_; }
  std::vector<std::string_view> start_markers() const override { return layout_.starts(); }
  ParsedText parse(std::string_view text, bool final, const json& tools) const override {
    Scan s = scan_calls(text, layout_, final);
    ParsedText out;
    out.content = std::move(s.content);
    for (const CallSpan& span : s.calls) {
      ParsedCall c;
      read_body(span.body, span.closed, final, tools, c);
      // A function the request did not offer is no call (and not content either), as in vLLM.
      if (c.name_done && !tool_format::tool_known(tools, c.name)) continue;
      out.calls.push_back(std::move(c));
      if (!out.calls.back().name_done) break;  // later calls wait for this one's name
    }
    return out;
  }

 protected:
  virtual void read_body(std::string_view body, bool closed, bool final, const json& tools, ParsedCall& c) const = 0;

 private:
  std::string_view name_;
  Layout layout_;
};

// Whether text is one complete JSON value.
bool complete_json(std::string_view text) { return !json::parse(text, nullptr, false).is_discarded(); }

// ---------------------------------------------------------------------------------------------
// Formats whose arguments are the model's own JSON text after a separator: DeepSeek V3 / V3.1,
// Kimi-K2. The arguments stream as written; a call left open at the end counts when its
// arguments are complete JSON.
class RawJsonFormat : public ScannedFormat {
 public:
  using ScannedFormat::ScannedFormat;

 protected:
  // Splits a body into header (name / id) and arguments; false while the separator is unseen.
  virtual bool split(std::string_view body, std::string_view& header, std::string_view& args) const = 0;
  virtual void read_header(std::string_view header, ParsedCall& c) const { c.name = std::string(trim(header)); }
  void read_body(std::string_view body, bool closed, bool final, const json&, ParsedCall& c) const override {
    std::string_view header, args;
    if (!split(body, header, args)) return;
    read_header(header, c);
    c.name_done = !c.name.empty();
    c.arguments = std::string(args);
    c.done = closed ? complete_json(args) : final && complete_json(args);
    if (c.done) c.arguments = std::string(trim(args));
  }
};

class DeepseekV31Format : public RawJsonFormat {
 public:
  DeepseekV31Format()
      : RawJsonFormat("deepseek_v31", {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                       "<｜tool▁call▁end｜>"}) {}
  CallSyntax syntax() const override {
    return call_syntax("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                       "<｜tool▁call▁end｜>");
  }

 protected:
  bool split(std::string_view body, std::string_view& header, std::string_view& args) const override {
    const std::string_view sep = "<｜tool▁sep｜>";
    const size_t at = body.find(sep);
    if (at == std::string_view::npos) return false;
    header = body.substr(0, at);
    args = body.substr(at + sep.size());
    return true;
  }
};

// function<｜tool▁sep｜>NAME\n```json\nARGS\n```
class DeepseekV3Format : public RawJsonFormat {
 public:
  DeepseekV3Format()
      : RawJsonFormat("deepseek_v3", {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                      "<｜tool▁call▁end｜>"}) {}
  // As DeepSeek-V3's template writes calls: newline-separated, the arguments in a json fence.
  CallSyntax syntax() const override {
    CallSyntax s =
        call_syntax("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                    "\n```json\n", "\n```<｜tool▁call▁end｜>");
    s.separator = "\n";
    return s;
  }

 protected:
  bool split(std::string_view body, std::string_view& header, std::string_view& args) const override {
    const std::string_view sep = "<｜tool▁sep｜>", fence = "```json";
    const size_t at = body.find(sep);
    if (at == std::string_view::npos) return false;
    std::string_view rest = body.substr(at + sep.size());
    const size_t f = rest.find(fence);
    if (f == std::string_view::npos) return false;
    header = rest.substr(0, f);
    args = rest.substr(f + fence.size());
    args.remove_prefix(std::min(args.size(), args.find_first_not_of(" \t\r\n")));
    // The closing fence is not part of the arguments (nor any prefix of it, while streaming).
    const size_t close = args.rfind("```");
    if (close != std::string_view::npos)
      args = args.substr(0, close);
    else
      args = args.substr(0, args.size() - partial_marker_suffix(args, {"\n```"}));
    return true;
  }
};

// functions.NAME:INDEX<|tool_call_argument_begin|>ARGS
class KimiK2Format : public RawJsonFormat {
 public:
  KimiK2Format()
      : RawJsonFormat("kimi_k2", {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                                  "<|tool_call_end|>"}) {}
  CallSyntax syntax() const override {
    CallSyntax s = call_syntax("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                               "<|tool_call_begin|>functions.", ":", "<|tool_call_end|>");
    s.index_pattern = "[0-9]{1,6}";
    s.args_begin = "<|tool_call_argument_begin|>";
    return s;
  }

 protected:
  bool split(std::string_view body, std::string_view& header, std::string_view& args) const override {
    const std::string_view sep = "<|tool_call_argument_begin|>";
    const size_t at = body.find(sep);
    if (at == std::string_view::npos) return false;
    header = body.substr(0, at);
    args = body.substr(at + sep.size());
    return true;
  }
  void read_header(std::string_view header, ParsedCall& c) const override {
    std::string_view id = trim(header);
    c.id = std::string(id);
    std::string_view name = id.substr(0, id.rfind(':'));
    const size_t dot = name.find('.');
    c.name = std::string(dot == std::string_view::npos ? name : name.substr(dot + 1));
  }
};

// ---------------------------------------------------------------------------------------------
// Formats with one value per argument, converted to JSON by the tool's schema: GLM and
// DeepSeek-V3.2 (DSML). Arguments stream one complete key/value pair at a time, written as
// Python's json.dumps would, so the pieces add up to the final string.
struct ArgPair {
  std::string key;
  ojson value;
};

std::string args_prefix(const std::vector<ArgPair>& pairs, bool close) {
  std::string s = "{";
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i) s += ", ";
    s += tool_format::py_json_dumps(ojson(pairs[i].key)) + ": " + tool_format::py_json_dumps(pairs[i].value);
  }
  if (close)
    s += "}";
  else if (pairs.empty())
    s.clear();  // nothing certain yet
  return s;
}

// NAME<arg_key>K</arg_key><arg_value>V</arg_value>...
class GlmFormat : public ScannedFormat {
 public:
  explicit GlmFormat(std::string_view name) : ScannedFormat(name, {"", "", "<tool_call>", "</tool_call>"}) {}
  // GLM-4.5/4.6 put a newline after the name, between pairs and between calls; GLM-4.7/5 none.
  CallSyntax syntax() const override {
    CallSyntax s = call_syntax("", "", "<tool_call>", "", "</tool_call>");
    s.separator = "\n";
    s.separator_optional = true;
    s.args_style = "glm_xml";
    s.args_newline_optional = true;
    return s;
  }

 protected:
  void read_body(std::string_view body, bool closed, bool final, const json& tools, ParsedCall& c) const override {
    const std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>", kVal = "<arg_value>", kValEnd = "</arg_value>";
    const size_t first = body.find(kKey);
    if (first == std::string_view::npos && !closed) {
      // The name is complete once a newline or the first <arg_key> follows it.
      const size_t nl = body.find('\n', body.find_first_not_of(" \t\n"));
      if (nl == std::string_view::npos) return;
      c.name = std::string(trim(body.substr(0, nl)));
    } else {
      c.name = std::string(trim(body.substr(0, first)));
    }
    c.name_done = !c.name.empty();
    if (!c.name_done) return;
    const json* props = tool_format::tool_properties(tools, c.name);
    std::vector<ArgPair> pairs;
    size_t pos = first;
    while (pos != std::string_view::npos) {
      const size_t ke = body.find(kKeyEnd, pos);
      if (ke == std::string_view::npos) break;
      const size_t vs = body.find(kVal, ke);
      if (vs == std::string_view::npos) break;
      const size_t ve = body.find(kValEnd, vs);
      if (ve == std::string_view::npos) break;
      std::string key(trim(body.substr(pos + kKey.size(), ke - pos - kKey.size())));
      std::string value(body.substr(vs + kVal.size(), ve - vs - kVal.size()));
      const json* schema = props && props->contains(key) ? &(*props)[key] : nullptr;
      pairs.push_back({std::move(key), tool_format::coerce_to_schema(value, schema)});
      pos = body.find(kKey, ve);
    }
    // Cut off at the end of the output: the call with its complete pairs (as vLLM).
    c.done = closed || final;
    c.arguments = args_prefix(pairs, c.done);
  }
};

// Models sometimes wrap a call's real arguments in one parameter "arguments" or "input"; vLLM's
// DSML parsers repair that. candidate: the call's only pair has such a name and the tool has no
// parameter of that name. inner: the real arguments, when the value (an object, or JSON text of
// one) has only names of the tool's parameters.
struct Unwrapped {
  bool candidate = false;      // a wrapper-shaped single pair (held back while streaming)
  std::optional<ojson> inner;  // the arguments inside, when it is a wrapper
};
Unwrapped unwrap_wrapper_pair(const std::vector<ArgPair>& pairs, const json* props) {
  Unwrapped u;
  if (pairs.size() != 1 || !props || !props->is_object() || props->empty()) return u;
  const ArgPair& p = pairs[0];
  if ((p.key != "arguments" && p.key != "input") || props->contains(p.key)) return u;
  u.candidate = true;
  ojson inner = p.value;
  if (inner.is_string()) {
    const std::string& text = inner.get_ref<const std::string&>();
    inner = json_depth_ok(text) ? ojson::parse(text, nullptr, false) : ojson(ojson::value_t::discarded);
  }
  if (!inner.is_object()) return u;
  for (auto it = inner.begin(); it != inner.end(); ++it)
    if (!props->contains(it.key())) return u;
  u.inner = std::move(inner);
  return u;
}

// DSML (DeepSeek-V3.2 and V4): a wrapper section holding
// <｜DSML｜invoke name="NAME">\n<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>...
// V3.2 wraps calls in <｜DSML｜function_calls>, V4 in <｜DSML｜tool_calls>. As vLLM's deepseek_v4
// parser, V4's also opens a section at the misspellings <｜DSML｜toolcalls> and <｜DSML｜tool>,
// and its section ends the turn.
class DsmlFormat : public ScannedFormat {
 public:
  DsmlFormat(std::string_view name, std::string_view begin, std::string_view end,
             std::vector<std::string_view> begin_variants, bool end_of_turn)
      : ScannedFormat(
            name, {begin, end, "<｜DSML｜invoke name=\"", "</｜DSML｜invoke>", std::move(begin_variants), end_of_turn}),
        begin_(begin),
        end_(end) {}
  // As DeepSeek's encoders write calls: the section, each invoke, each parameter on its own line.
  CallSyntax syntax() const override {
    CallSyntax s =
        call_syntax(std::string(begin_) + "\n", end_, "<｜DSML｜invoke name=\"", "\">\n", "</｜DSML｜invoke>\n");
    s.args_style = "deepseek_xml";
    return s;
  }

 protected:
  void read_body(std::string_view body, bool closed, bool final, const json& tools, ParsedCall& c) const override {
    const size_t q = body.find("\">");
    if (q == std::string_view::npos) return;
    c.name = std::string(body.substr(0, q));
    c.name_done = !c.name.empty();
    const json* props = tool_format::tool_properties(tools, c.name);
    std::vector<ArgPair> pairs = read_parameters(body.substr(q), props);
    c.done = closed || final;
    const Unwrapped u = unwrap_wrapper_pair(pairs, props);
    if (u.inner && c.done)
      c.arguments = tool_format::py_json_dumps(*u.inner);
    else if (u.candidate && !c.done)
      c.arguments.clear();  // may turn out to be a wrapper: nothing is certain yet
    else
      c.arguments = args_prefix(pairs, c.done);
  }

 private:
  // The complete <｜DSML｜parameter ...>V</｜DSML｜parameter> pairs in text. string="true": V as
  // is; otherwise V as JSON, else converted by the tool's schema.
  static std::vector<ArgPair> read_parameters(std::string_view text, const json* props) {
    const std::string_view kParam = "<｜DSML｜parameter name=\"", kParamEnd = "</｜DSML｜parameter>";
    std::vector<ArgPair> pairs;
    size_t pos = text.find(kParam);
    while (pos != std::string_view::npos) {
      const size_t head_end = text.find('>', pos + kParam.size());
      if (head_end == std::string_view::npos) break;
      const size_t ve = text.find(kParamEnd, head_end);
      if (ve == std::string_view::npos) break;
      // K" string="true|false"
      std::string_view head = text.substr(pos + kParam.size(), head_end - pos - kParam.size());
      std::string key(head.substr(0, head.find('"')));
      const bool is_string = head.find("string=\"true\"") != std::string_view::npos;
      std::string value(text.substr(head_end + 1, ve - head_end - 1));
      ojson v;
      if (is_string) {
        v = value;
      } else {
        const json* schema = props && props->contains(key) ? &(*props)[key] : nullptr;
        ojson parsed = json_depth_ok(value) ? ojson::parse(value, nullptr, false) : ojson(ojson::value_t::discarded);
        v = parsed.is_discarded() ? tool_format::coerce_to_schema(value, schema) : parsed;
      }
      pairs.push_back({std::move(key), std::move(v)});
      pos = text.find(kParam, ve);
    }
    return pairs;
  }
  std::string_view begin_, end_;
};

// <tool_call>{"name": N, "arguments": {...}}</tool_call>: the call is known once it closes.
class HermesFormat : public ScannedFormat {
 public:
  explicit HermesFormat(std::string_view name) : ScannedFormat(name, {"", "", "<tool_call>", "</tool_call>"}) {}
  // As Qwen3's template writes calls.
  CallSyntax syntax() const override {
    CallSyntax s = call_syntax("", "", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>");
    s.separator = "\n";
    s.json_name = true;
    return s;
  }
  // A call that does not parse makes the whole output content, no calls (as vLLM).
  ParsedText parse(std::string_view text, bool final, const json& tools) const override {
    ParsedText p = ScannedFormat::parse(text, final, tools);
    if (final)
      for (const auto& c : p.calls)
        if (!c.done) return {std::string(text), {}};
    return p;
  }

 protected:
  void read_body(std::string_view body, bool closed, bool final, const json&, ParsedCall& c) const override {
    if (!closed && !final) return;
    if (!json_depth_ok(body)) return;
    ojson j = ojson::parse(trim(body), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    auto n = j.find("name");
    if (n == j.end() || !n->is_string()) return;
    c.name = n->get<std::string>();
    c.name_done = !c.name.empty();
    auto a = j.find("arguments");
    if (a == j.end()) a = j.find("parameters");
    c.arguments = a == j.end() || a->is_null() ? std::string("{}") : tool_format::py_json_dumps(*a);
    c.done = c.name_done;
  }
};

}  // namespace

std::unique_ptr<ToolCallFormat> make_glm_format(std::string_view name) {
  return std::make_unique<GlmFormat>(name == "glm47" ? "glm47" : "glm45");
}
std::unique_ptr<ToolCallFormat> make_deepseek_v3_format() { return std::make_unique<DeepseekV3Format>(); }
std::unique_ptr<ToolCallFormat> make_deepseek_v31_format() { return std::make_unique<DeepseekV31Format>(); }
std::unique_ptr<ToolCallFormat> make_deepseek_v32_format() {
  return std::make_unique<DsmlFormat>("deepseek_v32", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>",
                                      std::vector<std::string_view>{}, /*end_of_turn=*/false);
}
std::unique_ptr<ToolCallFormat> make_deepseek_v4_format() {
  return std::make_unique<DsmlFormat>("deepseek_v4", "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>",
                                      std::vector<std::string_view>{"<｜DSML｜toolcalls>", "<｜DSML｜tool>"},
                                      /*end_of_turn=*/true);
}
std::unique_ptr<ToolCallFormat> make_kimi_k2_format() { return std::make_unique<KimiK2Format>(); }
std::unique_ptr<ToolCallFormat> make_hermes_format(std::string_view name) {
  return std::make_unique<HermesFormat>(name == "qwen3_xml_json" ? "qwen3_xml_json" : "hermes");
}

}  // namespace mla::server
