// The request side of the agent features: parser choice from real chat templates (as vLLM's docs
// pair them), tools / tool_choice validation, tool_calls messages made template-ready, the
// Anthropic request translation, and the scripted runner's position in its output.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "engine/scripted_runner.h"
#include "server/anthropic_protocol.h"
#include "server/chat_tools.h"
#include "server/reasoning.h"
#include "server/tool_parsers/tool_parser.h"

namespace mla::server {
namespace {

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(MLA_TEST_DIR) + "/fixtures/chat-templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

// vLLM's tool-calling docs: GLM-4.5+ glm45, DeepSeek-V3.1 deepseek_v31 and V3.2 deepseek_v32
// (reasoning deepseek_v3), DeepSeek-V4 deepseek_v4 (llama.cpp's template and mla's own),
// Kimi-K2 kimi_k2, Qwen3 hermes (reasoning qwen3).
TEST(AgentApi, ParsersChosenFromRealTemplates) {
  struct Case {
    const char* file;
    const char* tool;
    const char* reasoning;
  } cases[] = {
      {"GLM-5.2.jinja", "glm45", "glm45"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_v31", "deepseek_v3"},
      {"deepseek-ai-DeepSeek-V3.2.jinja", "deepseek_v32", "deepseek_v3"},
      {"deepseek-ai-DeepSeek-V4.jinja", "deepseek_v4", "deepseek_v4"},
      {"../../../models/templates/deepseek-v4.jinja", "deepseek_v4", "deepseek_v4"},
      {"moonshotai-Kimi-K2.jinja", "kimi_k2", ""},
      {"Qwen-Qwen3-0.6B.jinja", "hermes", "qwen3"},
  };
  for (const auto& c : cases) {
    const std::string src = read_template(c.file);
    EXPECT_EQ(detect_tool_call_format(src), c.tool) << c.file;
    EXPECT_EQ(detect_reasoning_parser(src), c.reasoning) << c.file;
  }
  EXPECT_EQ(detect_tool_call_format("{{ messages[0].content }}"), "");
  EXPECT_EQ(detect_reasoning_parser("{{ messages[0].content }}"), "");
  for (const auto& name : tool_call_format_names()) EXPECT_NE(make_tool_call_format(name), nullptr) << name;
  EXPECT_EQ(make_tool_call_format("nope"), nullptr);
}

TEST(AgentApi, ReasoningStartFollowsKwargsAndPrompt) {
  const json none = json::object();
  EXPECT_EQ(reasoning_starts_open("glm45", none, "<|assistant|><think>"), true);
  EXPECT_EQ(reasoning_starts_open("glm45", {{"enable_thinking", false}}, "x"), std::nullopt);
  EXPECT_EQ(reasoning_starts_open("deepseek_v3", none, "x"), std::nullopt);
  EXPECT_EQ(reasoning_starts_open("deepseek_v3", {{"thinking", true}}, "<think>"), true);
  EXPECT_EQ(reasoning_starts_open("qwen3", none, "<think>\n\n</think>\n\n"), false);
  EXPECT_EQ(reasoning_starts_open("deepseek_r1", {{"thinking", false}}, "x"), true);
}

TEST(AgentApi, ToolOptionsValidated) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(parse_tool_options(json::object(), tools).choice, ToolChoice::kAuto);
  EXPECT_EQ(parse_tool_options(json::object(), nullptr).choice, ToolChoice::kNone);
  EXPECT_EQ(parse_tool_options({{"tool_choice", "none"}}, tools).choice, ToolChoice::kNone);
  auto status = [&](const json& body, const json& t) {
    try {
      parse_tool_options(body, t);
    } catch (const ApiError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(status({{"tool_choice", "sometimes"}}, tools).find("\"sometimes\""), std::string::npos);
  EXPECT_EQ(parse_tool_options({{"tool_choice", "required"}}, tools).choice, ToolChoice::kRequired);
  const ChatToolOptions named =
      parse_tool_options({{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}, tools);
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.named, "f");
  EXPECT_TRUE(parse_tool_options({{"tool_choice", "required"}}, tools).parallel);
  EXPECT_FALSE(parse_tool_options({{"tool_choice", "required"}, {"parallel_tool_calls", false}}, tools).parallel);
  EXPECT_NE(status({{"parallel_tool_calls", "no"}}, tools).find("parallel_tool_calls"), std::string::npos);
  EXPECT_NE(status({{"tool_choice", "required"}}, json::array()).find("non-empty 'tools'"), std::string::npos);
  EXPECT_NE(status({{"tool_choice", "required"}}, nullptr).find("non-empty 'tools'"), std::string::npos);
  EXPECT_NE(status({{"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}, tools).find("'g'"),
            std::string::npos);
  EXPECT_NE(status(json::object(), json::parse(R"([{"type": "function"}])")).find("tools[0]"), std::string::npos);
  EXPECT_NE(
      status(json::object(), json::parse(R"([{"type": "retrieval", "function": {"name": "f"}}])")).find("tools[0]"),
      std::string::npos);
}

TEST(AgentApi, ARequiredCallIsParsedEvenWithoutAServerParser) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  ServerParsers none;
  EXPECT_EQ(output_parsing(none, tools, parse_tool_options(json::object(), tools), json::object(), "").tool_format,
            nullptr);
  const OutputParsing p =
      output_parsing(none, tools, parse_tool_options({{"tool_choice", "required"}}, tools), json::object(), "");
  ASSERT_NE(p.tool_format, nullptr);
  EXPECT_EQ(p.tool_format->name(), "hermes");
  ServerParsers glm;
  glm.tool_format = make_tool_call_format("glm45");
  EXPECT_EQ(output_parsing(glm, tools, parse_tool_options({{"tool_choice", "required"}}, tools), json::object(), "")
                .tool_format->name(),
            "glm45");
  EXPECT_EQ(
      output_parsing(glm, tools, parse_tool_options({{"tool_choice", "none"}}, tools), json::object(), "").tool_format,
      nullptr);
}

TEST(AgentApi, ToolCallMessagesBecomeTemplateReady) {
  json msgs = json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"k\": [1, 2]}"}},
      {"id": "b", "type": "function", "function": {"name": "g", "arguments": ""}}]}])");
  prepare_assistant_messages(msgs);
  EXPECT_EQ(msgs[1]["content"], "");
  EXPECT_EQ(msgs[1]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"k": [1, 2]})"));
  EXPECT_EQ(msgs[1]["tool_calls"][1]["function"]["arguments"], json::object());
  json bad = json::parse(R"([{"role": "assistant", "tool_calls": [
      {"function": {"name": "f", "arguments": "[1]"}}]}])");
  EXPECT_THROW(prepare_assistant_messages(bad), ApiError);
  json renamed = json::parse(R"([{"role": "assistant", "content": "a", "reasoning": "r"}])");
  prepare_assistant_messages(renamed);
  EXPECT_EQ(renamed[0]["reasoning_content"], "r");
}

TEST(AgentApi, AnthropicRequestTranslation) {
  const json body = json::parse(R"({
    "model": "claude-x", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3,
    "tools": [{"name": "get_weather", "description": "d",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 2048},
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Need it.", "signature": ""},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
        {"type": "text", "text": "And tomorrow?"}]}]})");
  AnthropicRequest r = parse_anthropic_request(body, {1000, 4096}, false);
  const json want_messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Checking.", "reasoning_content": "Need it.",
     "tool_calls": [{"id": "toolu_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
    {"role": "user", "content": "And tomorrow?"}])");
  EXPECT_EQ(r.messages, want_messages);
  EXPECT_EQ(r.tools, json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])"));
  EXPECT_EQ(r.tool_options.choice, ToolChoice::kAuto);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], true);
  EXPECT_EQ(r.params.max_tokens, 64);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_EQ(r.params.top_k, 3);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"END"});
  EXPECT_FALSE(r.continue_final_message);

  auto error = [](const char* text, bool count_only = false) {
    try {
      parse_anthropic_request(json::parse(text), {1000, 4096}, count_only);
    } catch (const ApiError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(R"({"messages": [{"role": "user", "content": "x"}]})").find("max_tokens"), std::string::npos);
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}]})", true), "");
  EXPECT_NE(error(R"({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})").find("messages[0].role"),
            std::string::npos);
  EXPECT_NE(
      error(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})").find("'image'"),
      std::string::npos);
  EXPECT_NE(error(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                      "tools": [{"name": "w", "type": "web_search_20250305"}]})")
                .find("server tool"),
            std::string::npos);
  EXPECT_NE(error(R"({"max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]})")
                .find("temperature"),
            std::string::npos);
  // A final assistant message is a prefill to continue.
  AnthropicRequest pre =
      parse_anthropic_request(json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
                     {"role": "assistant", "content": "The answer is"}]})"),
                              {1000, 4096}, false);
  EXPECT_TRUE(pre.continue_final_message);
  EXPECT_EQ(anthropic_error_json(ApiError(401, "no")),
            json::parse(R"({"type": "error", "error": {"type": "authentication_error", "message": "no"}})"));
}

TEST(AgentApi, ScriptedRunnerFollowsItsOutput) {
  // Tokens are their own text: 'a' = 97 ...
  auto decode = [](std::span<const int32_t> ids) {
    std::string s;
    for (int32_t t : ids) s += static_cast<char>(t);
    return s;
  };
  std::vector<ScriptEntry> script = {{"hot", {'x', 'y', 'x'}}, {"", {'o', 'k'}}};
  ScriptedRunner r(script, 128, 0, decode);
  auto next = [&](const std::string& ctx) {
    std::vector<int32_t> ids(ctx.begin(), ctx.end());
    return r.next_token(ids);
  };
  EXPECT_EQ(next("is it hot?"), 'x');
  EXPECT_EQ(next("is it hot?x"), 'y');
  EXPECT_EQ(next("is it hot?xy"), 'x');
  EXPECT_EQ(next("is it hot?xyx"), 0);  // EOS
  EXPECT_EQ(next("cold?"), 'o');
  EXPECT_EQ(next("cold?ok"), 0);
}

}  // namespace
}  // namespace mla::server
