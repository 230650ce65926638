// tool_choice required / named as grammars (server/tool_choice.h): for each tool-call format, the
// calls its chat template writes (rendered by jinja2 from the real templates in
// tests/fixtures/chat-templates/, pasted here) are accepted whole; text that is no call, a call of
// another function, arguments against the schema and a second call where one is allowed are not.
#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/tool_choice.h"
#include "server/tool_parsers/tool_parser.h"

namespace mla::server {
namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search the web",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "set_unit",
   "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["C", "F"]},
                  "label": {"type": "string", "maxLength": 3}}, "required": ["unit"]}}}])");

// Every single byte is a token (id 0 is the stop token): the grammar alone decides.
GrammarCompiler& compiler() {
  static GrammarCompiler c = [] {
    std::vector<std::string> vocab = {""};
    for (int b = 1; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
    return GrammarCompiler(vocab, 256, {0}, 1, 64);
  }();
  return c;
}

ChatToolOptions required(bool parallel = true) {
  ChatToolOptions o;
  o.choice = ToolChoice::kRequired;
  o.parallel = parallel;
  return o;
}
ChatToolOptions named(const std::string& name) {
  ChatToolOptions o;
  o.choice = ToolChoice::kNamed;
  o.named = name;
  return o;
}

GrammarMatcher matcher(const std::string& format, const ChatToolOptions& o, bool reasoning_open = false) {
  auto f = make_tool_call_format(format);
  EXPECT_TRUE(f) << format;
  return GrammarMatcher(compiler().compile(tool_call_grammar(*f, kTools, o, reasoning_open, 16)));
}

// Whether the grammar takes `text` whole and could end there.
bool accepts(GrammarMatcher m, const std::string& text) { return m.accept_text(text) && m.can_end(); }

// Two calls as each template writes them: get_weather(city="Paris", days=3), search(query="x").
struct Rendered {
  const char* format;
  const char* text;
};
const Rendered kTwoCalls[] = {
    // GLM-5.2 / GLM-4.7-Flash
    {"glm45",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
     "<arg_value>3</arg_value></tool_call><tool_call>search<arg_key>query</arg_key><arg_value>x</arg_value>"
     "</tool_call>"},
    // GLM-4.6
    {"glm45",
     "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
     "<arg_value>3</arg_value>\n</tool_call>\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>x"
     "</arg_value>\n</tool_call>"},
    // DeepSeek-V3.1
    {"deepseek_v31",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}"
     "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"x\"}<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>"},
    // DeepSeek-V3 (vLLM's tool template)
    {"deepseek_v3",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", "
     "\"days\": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n"
     "{\"query\": \"x\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
    // DeepSeek-V3.2
    {"deepseek_v32",
     "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
     "string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3"
     "</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter "
     "name=\"query\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
    // DeepSeek-V4, as its encoder writes calls
    {"deepseek_v4",
     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
     "string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3"
     "</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter "
     "name=\"query\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"},
    // Kimi-K2
    {"kimi_k2",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
     "{\"city\": \"Paris\", \"days\": 3}<|tool_call_end|><|tool_call_begin|>functions.search:1"
     "<|tool_call_argument_begin|>{\"query\": \"x\"}<|tool_call_end|><|tool_calls_section_end|>"},
    // Qwen3
    {"hermes",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>"},
};

TEST(ToolChoice, RequiredAcceptsTheTemplatesOwnCalls) {
  for (const auto& r : kTwoCalls) EXPECT_TRUE(accepts(matcher(r.format, required()), r.text)) << r.text;
}

TEST(ToolChoice, RequiredRefusesTextAndTruncatedCalls) {
  for (const auto& r : kTwoCalls) {
    EXPECT_FALSE(matcher(r.format, required()).accept_text("Sure")) << r.format;
    const std::string text = r.text;
    EXPECT_FALSE(accepts(matcher(r.format, required()), text.substr(0, text.size() - 3))) << r.format;
    EXPECT_FALSE(accepts(matcher(r.format, required()), "")) << r.format;
  }
}

TEST(ToolChoice, ParallelFalseAllowsOneCall) {
  for (const auto& r : kTwoCalls) {
    const std::string text = r.text;
    EXPECT_FALSE(accepts(matcher(r.format, required(false)), text)) << r.format;
  }
  EXPECT_TRUE(accepts(matcher("hermes", required(false)),
                      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>"));
}

TEST(ToolChoice, NamedAllowsExactlyThatFunction) {
  const std::string weather =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  EXPECT_TRUE(accepts(matcher("deepseek_v31", named("get_weather")), weather));
  EXPECT_FALSE(accepts(matcher("deepseek_v31", named("search")), weather));
  EXPECT_FALSE(
      matcher("deepseek_v31", named("search")).accept_text("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"));
  EXPECT_FALSE(accepts(matcher("glm45", named("search")),
                       "<tool_call>search<arg_key>query</arg_key><arg_value>x</arg_value></tool_call>"
                       "<tool_call>search<arg_key>query</arg_key><arg_value>y</arg_value></tool_call>"));
}

TEST(ToolChoice, ArgumentsFollowTheSchema) {
  auto v31 = [](const std::string& args) {
    return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + args +
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  };
  EXPECT_TRUE(accepts(matcher("deepseek_v31", named("get_weather")), v31(R"({"city": "Rome", "days": 2})")));
  EXPECT_FALSE(accepts(matcher("deepseek_v31", named("get_weather")), v31(R"({"city": 3})")));  // wrong type
  EXPECT_FALSE(accepts(matcher("deepseek_v31", named("get_weather")), v31(R"({"days": 3})")));  // no city
  EXPECT_FALSE(accepts(matcher("deepseek_v31", named("get_weather")), v31(R"({"city": "R", "days": 1.5})")));
  // GLM writes strings raw: nothing pads them (the parser would keep the padding).
  auto glm_unit = [](const std::string& pairs) { return "<tool_call>set_unit" + pairs + "</tool_call>"; };
  EXPECT_TRUE(
      accepts(matcher("glm45", named("set_unit")), glm_unit("<arg_key>unit</arg_key><arg_value>C</arg_value>")));
  EXPECT_FALSE(
      accepts(matcher("glm45", named("set_unit")), glm_unit("<arg_key>unit</arg_key><arg_value> C</arg_value>")));
  EXPECT_FALSE(accepts(matcher("glm45", named("set_unit")), glm_unit("<arg_key>label</arg_key><arg_value>ab"
                                                                     "</arg_value>")));  // unit is required
  EXPECT_TRUE(accepts(matcher("glm45", named("set_unit")),
                      glm_unit("<arg_key>unit</arg_key><arg_value>F</arg_value><arg_key>label</arg_key>"
                               "<arg_value>a b</arg_value>")));
  EXPECT_FALSE(accepts(matcher("glm45", named("set_unit")),
                       glm_unit("<arg_key>unit</arg_key><arg_value>F</arg_value><arg_key>label</arg_key>"
                                "<arg_value>abcd</arg_value>")));
  // GLM writes integers bare.
  EXPECT_FALSE(accepts(matcher("glm45", named("get_weather")),
                       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>days</arg_key>"
                       "<arg_value>three</arg_value></tool_call>"));
}

TEST(ToolChoice, ReasoningIsFreeUntilItEnds) {
  const std::string call = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>";
  EXPECT_TRUE(accepts(matcher("hermes", required(), true), "<think>\nLet me search.\n</think>\n\n" + call));
  EXPECT_TRUE(accepts(matcher("hermes", required(), true), "Let me search.</think>" + call));
  // No call after the reasoning, or a call inside it: refused.
  EXPECT_FALSE(accepts(matcher("hermes", required(), true), "Let me search.</think>\n\nDone."));
  EXPECT_FALSE(matcher("hermes", required(), true).accept_text("Let me <tool_call>"));
  // A request that does not think starts with the call.
  EXPECT_FALSE(matcher("hermes", required(), false).accept_text("Let me search.</think>"));
}

TEST(ToolChoice, ControlTokenMarkersAreListedForTheVocabulary) {
  auto f = make_tool_call_format("deepseek_v31");
  const auto m = constrained_call_markers(*f);
  for (const char* want : {"<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "</think>"})
    EXPECT_NE(std::find(m.begin(), m.end(), std::string(want)), m.end()) << want;
}

}  // namespace
}  // namespace mla::server
