// DeepSeek-V4's output parsing: the deepseek_v4 tool-call format and reasoning parser on texts
// written as V4's encoder writes an assistant turn (vLLM's tokenizers/deepseek_v4_encoding.py:
// reasoning, "</think>", the content, then "\n\n<｜DSML｜tool_calls>\n", invokes joined by "\n",
// each parameter on its own line). Every text is parsed whole and streamed in every split into
// two pieces and byte by byte; all must agree. (tests/server/parser_fixture_test.cpp compares the
// same parsers with vLLM's own on other texts.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/reasoning.h"
#include "server/tool_parsers/tool_parser.h"

namespace mla::server {
namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
    "query": {"type": "string"}, "filters": {"type": "object"}}}}}
])");

std::string param(const std::string& k, const std::string& v, bool is_string) {
  return "<｜DSML｜parameter name=\"" + k + "\" string=\"" + (is_string ? "true" : "false") + "\">" + v +
         "</｜DSML｜parameter>";
}
std::string invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
  for (size_t i = 0; i < params.size(); ++i) s += (i ? "\n" : "") + params[i];
  return s + "\n</｜DSML｜invoke>";
}
std::string section(const std::vector<std::string>& invokes) {
  std::string s = "\n\n<｜DSML｜tool_calls>\n";
  for (size_t i = 0; i < invokes.size(); ++i) s += (i ? "\n" : "") + invokes[i];
  return s + "\n</｜DSML｜tool_calls>";
}

struct Out {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool has_reasoning = false;
  bool operator==(const Out&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Out& o) {
  os << "reasoning=" << json(o.reasoning).dump() << " content=" << json(o.content).dump();
  for (const auto& [n, a] : o.calls) os << " call " << n << " " << a;
  return os;
}

struct Parsing {
  std::unique_ptr<ToolCallFormat> format = make_tool_call_format("deepseek_v4");
  OutputParsing p;
  explicit Parsing(const json& kwargs, std::string_view prompt = "<｜Assistant｜><think>") {
    p.tool_format = format.get();
    p.tools = kTools;
    p.reasoning_open = reasoning_starts_open("deepseek_v4", kwargs, prompt);
    p.reasoning_breaks = reasoning_breaks_at_tool_calls("deepseek_v4");
    p.reasoning_trim = reasoning_trims_end("deepseek_v4");
  }
};

Out whole(const OutputParsing& p, const std::string& text) {
  ChatMessageOut m = parse_chat_output(p, text);
  Out o{m.reasoning.value_or(""), m.content, {}, m.reasoning.has_value()};
  for (const auto& c : m.tool_calls) o.calls.emplace_back(c.name, c.arguments);
  return o;
}

// The text fed in the given pieces; call pieces are joined per index (the id and name once).
Out streamed(const OutputParsing& p, const std::vector<std::string_view>& pieces) {
  ChatOutputStream s(p);
  Out o;
  auto take = [&](const ChatDelta& d) {
    o.reasoning += d.reasoning;
    o.content += d.content;
    for (const auto& t : d.tool_calls) {
      if (static_cast<size_t>(t.index) >= o.calls.size()) o.calls.resize(t.index + 1);
      EXPECT_TRUE(t.id.empty() || o.calls[t.index].first.empty()) << "a call's id and name sent twice";
      o.calls[t.index].first += t.name;
      o.calls[t.index].second += t.arguments;
    }
  };
  for (auto piece : pieces) take(s.feed(piece));
  take(s.finish());
  o.has_reasoning = !o.reasoning.empty();
  return o;
}

// Whole == want, and every streaming of the text gives the same (reasoning compared as text).
void expect_everywhere(const OutputParsing& p, const std::string& text, const Out& want) {
  Out w = whole(p, text);
  EXPECT_EQ(w, want) << "whole: " << json(text).dump();
  Out want_streamed = want;
  want_streamed.has_reasoning = !want.reasoning.empty();
  const std::string_view t = text;
  for (size_t cut = 0; cut <= t.size(); ++cut)
    ASSERT_EQ(streamed(p, {t.substr(0, cut), t.substr(cut)}), want_streamed) << "split at " << cut;
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < t.size(); ++i) bytes.push_back(t.substr(i, 1));
  EXPECT_EQ(streamed(p, bytes), want_streamed) << "byte by byte";
}

const json kThinking = json::object();  // V4 thinks unless told not to
const json kChat = {{"thinking", false}};

TEST(DeepseekV4Parser, ReasoningContentAndCalls) {
  Parsing ps(kThinking);
  const std::string text = "Need the weather.</think>Checking." +
                           section({invoke("get_weather", {param("city", "Paris", true), param("days", "3", false)}),
                                    invoke("search", {param("query", "a \"quoted\"\nline", true),
                                                      param("filters", "{\"year\": 2024}", false)})});
  expect_everywhere(ps.p, text,
                    {"Need the weather.",
                     "Checking.\n\n",
                     {{"get_weather", R"({"city": "Paris", "days": 3})"},
                      {"search", R"({"query": "a \"quoted\"\nline", "filters": {"year": 2024}})"}},
                     true});
}

TEST(DeepseekV4Parser, ACallSectionEndsTheReasoning) {
  Parsing ps(kThinking);
  const std::string text = "plan" + section({invoke("get_weather", {param("city", "Oslo", true)})});
  expect_everywhere(ps.p, text, {"plan", "", {{"get_weather", R"({"city": "Oslo"})"}}, true});
}

TEST(DeepseekV4Parser, ChatModeHasNoReasoning) {
  // The template ended the prompt with </think>: the output is the answer.
  Parsing ps(kChat, "<｜Assistant｜></think>");
  EXPECT_EQ(ps.p.reasoning_open, false);
  expect_everywhere(ps.p, "Sure." + section({invoke("get_weather", {param("city", "Rome", true)})}),
                    {"", "Sure.\n\n", {{"get_weather", R"({"city": "Rome"})"}}, false});
  expect_everywhere(ps.p, "2 < 3 and a </think> tag", {"", "2 < 3 and a </think> tag", {}, false});
}

TEST(DeepseekV4Parser, ThinkingSwitchesAsVllm) {
  const json none = json::object();
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", none, "<｜Assistant｜><think>"), true);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"thinking", true}}, "<think>"), true);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"enable_thinking", 1}}, "<think>"), true);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"thinking", false}}, "</think>"), false);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"enable_thinking", false}}, "</think>"), false);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"thinking", false}, {"enable_thinking", true}}, "<think>"), true);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"reasoning_effort", "none"}}, "</think>"), false);
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", {{"reasoning_effort", "max"}}, "<think>"), true);
  // Thinking, but the prompt already closed the reasoning (a history-only render).
  EXPECT_EQ(reasoning_starts_open("deepseek_v4", none, "<｜Assistant｜></think>"), false);
  EXPECT_TRUE(reasoning_breaks_at_tool_calls("deepseek_v4"));
}

TEST(DeepseekV4Parser, MisspelledOpenersAndTextAfterTheSection) {
  Parsing ps(kChat, "</think>");
  for (const char* opener : {"<｜DSML｜toolcalls>", "<｜DSML｜tool>"}) {
    const std::string text = std::string("\n\n") + opener + "\n" +
                             invoke("get_weather", {param("city", "Paris", true)}) + "\n</｜DSML｜tool_calls>";
    expect_everywhere(ps.p, text, {"", "", {{"get_weather", R"({"city": "Paris"})"}}, false});
  }
  // The section ends the turn: what follows is neither content nor a call.
  expect_everywhere(ps.p,
                    "A." + section({invoke("search", {param("query", "x", true)})}) + "\nDone." +
                        section({invoke("search", {param("query", "y", true)})}),
                    {"", "A.\n\n", {{"search", R"({"query": "x"})"}}, false});
}

TEST(DeepseekV4Parser, PartialAndInvalidCalls) {
  Parsing ps(kChat, "</think>");
  const std::string open = "\n\n<｜DSML｜tool_calls>\n";
  // Cut off inside a parameter: the call with its complete parameters.
  expect_everywhere(ps.p,
                    open + "<｜DSML｜invoke name=\"get_weather\">\n" + param("days", "2", false) + "\n" +
                        "<｜DSML｜parameter name=\"city\" string=\"true\">Par",
                    {"", "", {{"get_weather", R"({"days": 2})"}}, false});
  // Cut off before the name is closed: no call.
  expect_everywhere(ps.p, "Hm." + open + "<｜DSML｜invoke name=\"get_wea", {"", "Hm.\n\n", {}, false});
  // A function the request did not offer: no call (the text before it stays content).
  expect_everywhere(ps.p, section({invoke("launch_rocket", {param("x", "1", false)})}), {"", "\n\n", {}, false});
  // string="false" with text that is not JSON: converted by the schema, else kept as text.
  expect_everywhere(ps.p,
                    section({invoke("get_weather", {param("days", "3 days", false), param("city", "[x", false)})}),
                    {"", "", {{"get_weather", R"({"days": "3 days", "city": "[x"})"}}, false});
  // A missing string attribute reads as string="false".
  expect_everywhere(ps.p, section({invoke("get_weather", {"<｜DSML｜parameter name=\"days\">4</｜DSML｜parameter>"})}),
                    {"", "", {{"get_weather", R"({"days": 4})"}}, false});
  // A marker prefix that never completes is content.
  expect_everywhere(ps.p, "a <｜DSML｜tool_c", {"", "a <｜DSML｜tool_c", {}, false});
}

TEST(DeepseekV4Parser, WrappedArgumentsAreUnwrapped) {
  Parsing ps(kChat, "</think>");
  expect_everywhere(ps.p,
                    section({invoke("get_weather", {param("arguments", R"({"city": "Oslo", "days": 2})", false)})}),
                    {"", "", {{"get_weather", R"({"city": "Oslo", "days": 2})"}}, false});
  expect_everywhere(ps.p, section({invoke("get_weather", {param("input", R"({"city": "Oslo"})", true)})}),
                    {"", "", {{"get_weather", R"({"city": "Oslo"})"}}, false});
  // Not a wrapper: a key the tool does not have inside, or a second parameter beside it.
  expect_everywhere(ps.p, section({invoke("search", {param("arguments", R"({"query": "x", "other": 1})", false)})}),
                    {"", "", {{"search", R"({"arguments": {"query": "x", "other": 1}})"}}, false});
  expect_everywhere(
      ps.p, section({invoke("search", {param("input", R"({"query": "x"})", false), param("query", "y", true)})}),
      {"", "", {{"search", R"({"input": {"query": "x"}, "query": "y"})"}}, false});
}

TEST(DeepseekV4Parser, SyntaxIsTheEncodersLayout) {
  const CallSyntax s = make_tool_call_format("deepseek_v4")->syntax();
  // One call as the grammar writes it equals the encoder's (params each on their own line).
  const std::string mine = s.section_begin + s.call_begin + "search" + s.name_end + param("query", "x", true) + "\n" +
                           s.call_end + s.section_end;
  EXPECT_EQ("\n\n" + mine, section({invoke("search", {param("query", "x", true)})}));
  EXPECT_EQ(s.args_style, "deepseek_xml");
}

}  // namespace
}  // namespace mla::server
