// mla's tool-call and reasoning parsers against vLLM's own, on the outputs in
// tests/fixtures/parsers/vllm_parsers.json (written by tools/vllm-ref/gen_parser_fixtures.py from
// PyPI vllm). Each case is checked whole (vLLM's Parser.parse) and streamed (its parse_delta
// results joined; mla is fed 3 bytes at a time, so markers and characters are split).
//
// Where mla deliberately differs from vLLM the case is listed in kDeviations with the reason and
// the value mla gives instead, taken from vLLM too where vLLM's two paths disagree.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "server/chat_output.h"
#include "server/reasoning.h"
#include "server/tool_parsers/tool_parser.h"

namespace mla::server {
namespace {

json load_fixture() {
  std::ifstream in(std::string(MLA_TEST_DIR) + "/fixtures/parsers/vllm_parsers.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string str_or_empty(const json& v) { return v.is_string() ? v.get<std::string>() : ""; }

struct Result {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

// Arguments compared as JSON values when both parse (key order and spacing are free), else as
// text.
void expect_calls(const json& want, const Result& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.calls.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i]["name"].get<std::string>(), got.calls[i].first) << what << " call " << i;
    json mine = json::parse(got.calls[i].second, nullptr, false);
    if (!want[i]["arguments_json"].is_null() && !mine.is_discarded())
      EXPECT_EQ(want[i]["arguments_json"], mine) << what << " call " << i;
    else
      EXPECT_EQ(want[i]["arguments"].get<std::string>(), got.calls[i].second) << what << " call " << i;
  }
}

OutputParsing parsing_for(const json& c, const json& tools, std::unique_ptr<ToolCallFormat>& fmt) {
  OutputParsing p;
  if (c["tool_parser"].is_string()) {
    fmt = make_tool_call_format(c["tool_parser"].get<std::string>());
    p.tool_format = fmt.get();
    p.tools = tools;
  }
  if (c["reasoning_parser"].is_string()) {
    const std::string name = c["reasoning_parser"].get<std::string>();
    p.reasoning_open = reasoning_starts_open(name, c["chat_template_kwargs"], "");
    p.reasoning_breaks = reasoning_breaks_at_tool_calls(name);
    p.reasoning_trim = reasoning_trims_end(name);
  }
  return p;
}

Result run_whole(const OutputParsing& p, const std::string& text) {
  ChatMessageOut m = parse_chat_output(p, text);
  Result r{m.reasoning.value_or(""), m.content, {}};
  for (auto& c : m.tool_calls) r.calls.emplace_back(c.name, c.arguments);
  return r;
}

Result run_streamed(const OutputParsing& p, const std::string& text) {
  ChatOutputStream s(p);
  Result r;
  std::vector<std::pair<std::string, std::string>> calls;
  auto take = [&](ChatDelta d) {
    r.reasoning += d.reasoning;
    r.content += d.content;
    for (auto& t : d.tool_calls) {
      if (static_cast<size_t>(t.index) >= calls.size()) calls.resize(t.index + 1);
      if (!t.id.empty()) EXPECT_TRUE(calls[t.index].first.empty()) << "id/name sent twice";
      calls[t.index].first += t.name;
      calls[t.index].second += t.arguments;
    }
  };
  for (size_t i = 0; i < text.size(); i += 3) take(s.feed(std::string_view(text).substr(i, 3)));
  take(s.finish());
  r.calls = calls;
  return r;
}

// A DeepSeek-V4 request that does not think (chat_template_kwargs thinking / enable_thinking
// false, or reasoning_effort "none").
bool v4_not_thinking(const json& c) {
  return c["reasoning_parser"] == "deepseek_v4" &&
         !reasoning_starts_open("deepseek_v4", c["chat_template_kwargs"], "").value_or(true);
}

// The output ends inside a call (no </｜DSML｜invoke>).
bool cut_off_in_call(const json& c) {
  return c["output"].get<std::string>().find("</｜DSML｜invoke>") == std::string::npos;
}

struct Deviation {
  const char* parser;         // the case's tool parser, or its reasoning parser when it has none
  const char* output_starts;  // the case's output starts with this
  const char* path;           // "whole" or "streamed"
  const char* reason;
  // What mla gives instead (null: same as vLLM's for the other path).
  std::optional<std::vector<std::pair<std::string, std::string>>> calls;
  bool (*when)(const json& c) = nullptr;  // a further condition on the case, null: none
};

const Deviation kDeviations[] = {
    {"glm45", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo", "whole",
     "text after a call stays content (vLLM drops it from the whole message but streams it)", std::nullopt},
    {"glm45", "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par", "streamed",
     "arguments stream one complete key/value pair at a time (vLLM streams inside a string value, "
     "then its whole message has '{}')",
     std::vector<std::pair<std::string, std::string>>{{"get_weather", "{}"}}},
    {"deepseek_v32",
     "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
     "string=\"true\">Par",
     "streamed", "as for glm45: complete parameters only",
     std::vector<std::pair<std::string, std::string>>{{"get_weather", "{}"}}},
    {"kimi_k2",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
     "\"Pa",
     "whole",
     "a call cut off inside its JSON arguments is dropped, as deepseek_v3/v31 do (vLLM's "
     "kimi_k2 returns the invalid JSON as arguments)",
     std::vector<std::pair<std::string, std::string>>{}},
    {"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "streamed",
     "a call streams only once it is complete (its JSON parsed), so a cut-off call ends as content "
     "as in the whole message",
     std::nullopt},
    {"deepseek_v4",
     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
     "string=\"true\">Par",
     "streamed", "as for glm45: complete parameters only",
     std::vector<std::pair<std::string, std::string>>{{"get_weather", "{}"}}, cut_off_in_call},
    {"deepseek_v4",
     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"input\"", "streamed",
     "a wrapper-shaped argument waits for the end of its call, so the stream unwraps it as the whole "
     "message does (vLLM's stream sends the wrapper's key)",
     std::nullopt},
    {"deepseek_v4", "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"launch_rocket\"", "whole",
     "a function the request did not offer is no call, as in every other format (vLLM's deepseek_v4 "
     "returns it)",
     std::vector<std::pair<std::string, std::string>>{}},
    {"deepseek_v4", "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"launch_rocket\"", "streamed",
     "as in the whole message", std::vector<std::pair<std::string, std::string>>{}},
    {"deepseek_v4", "<｜DSML｜invoke name=", "whole",
     "an invoke outside a <｜DSML｜tool_calls> section is text (vLLM's deepseek_v4 takes it as a call)",
     std::vector<std::pair<std::string, std::string>>{}},
    {"deepseek_v4", "<｜DSML｜invoke name=", "streamed", "as in the whole message",
     std::vector<std::pair<std::string, std::string>>{}},
    {"deepseek_v4", "<think>", "streamed",
     "without thinking, a leading <think> still opens the reasoning, as in vLLM's whole message (its "
     "stream leaves the tags in the content)",
     std::nullopt, v4_not_thinking},
    {"deepseek_v4", "I should greet.</think>", "whole",
     "without thinking, a </think> that closes nothing stays in the content, as in vLLM's stream (its "
     "whole message drops the tag)",
     std::nullopt, v4_not_thinking},
    {"hermes", "<tool_call>\n{\"name\": get_weather}", "streamed",
     "a call whose JSON does not parse ends as content, as in the whole message (vLLM's stream "
     "drops it)",
     std::nullopt},
};

const Deviation* deviation(const json& c, const char* path) {
  const json& parser = c["tool_parser"].is_string() ? c["tool_parser"] : c["reasoning_parser"];
  for (const auto& d : kDeviations)
    if (parser.is_string() && parser == d.parser && c["output"].get<std::string>().starts_with(d.output_starts) &&
        std::string(path) == d.path && (!d.when || d.when(c)))
      return &d;
  return nullptr;
}

std::string fmt_case(const json& c) {
  return "tool=" + (c["tool_parser"].is_string() ? c["tool_parser"].get<std::string>() : "-") +
         " reasoning=" + (c["reasoning_parser"].is_string() ? c["reasoning_parser"].get<std::string>() : "-") +
         " kwargs=" + c["chat_template_kwargs"].dump() + " output=" + json(c["output"]).dump();
}

TEST(ParserFixtures, MatchVllm) {
  const json doc = load_fixture();
  ASSERT_GT(doc["cases"].size(), 50u);
  int n_checked = 0;
  std::set<const Deviation*> used;
  for (const auto& c : doc["cases"]) {
    const std::string text = c["output"].get<std::string>();
    const std::string what = fmt_case(c);
    std::unique_ptr<ToolCallFormat> fmt;
    const OutputParsing p = parsing_for(c, doc["tools"], fmt);
    for (const char* path : {"whole", "streamed"}) {
      const json& want = c[path];
      ASSERT_FALSE(want.contains("error")) << what << ": the reference failed: " << want["error"];
      const Result got = std::string(path) == "whole" ? run_whole(p, text) : run_streamed(p, text);
      const std::string label = what + " [" + path + "]";
      if (const Deviation* d = deviation(c, path)) {
        used.insert(d);
        const json& other = c[std::string(path) == "whole" ? "streamed" : "whole"];
        if (d->calls) {
          ASSERT_EQ(d->calls->size(), got.calls.size()) << label;
          for (size_t i = 0; i < got.calls.size(); ++i) {
            EXPECT_EQ((*d->calls)[i].first, got.calls[i].first) << label;
            EXPECT_EQ(json::parse((*d->calls)[i].second), json::parse(got.calls[i].second)) << label;
          }
        } else {
          EXPECT_EQ(str_or_empty(other["content"]), got.content) << label;
          expect_calls(other["tool_calls"], got, label);
        }
        continue;
      }
      EXPECT_EQ(str_or_empty(want["reasoning"]), got.reasoning) << label;
      EXPECT_EQ(str_or_empty(want["content"]), got.content) << label;
      expect_calls(want["tool_calls"], got, label);
      ++n_checked;
    }
  }
  EXPECT_EQ(used.size(), std::size(kDeviations)) << "a listed deviation matched no case";
  EXPECT_GT(n_checked, 150);
}

}  // namespace
}  // namespace mla::server
