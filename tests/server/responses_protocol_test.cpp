// The Responses API request side: input items → chat messages, tools, tool_choice, text.format,
// reasoning → the chat body; 400s naming the field.
#include "server/responses_protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"

namespace mla::server {
namespace {

TEST(ResponsesProtocol, ItemsBecomeChatMessages) {
  const json body = json::parse(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.5,
    "input": [
      {"role": "user", "content": "Weather?"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need it."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
    "reasoning": {"effort": "none"}, "stream": true, "store": true})");
  ResponsesRequest r = parse_responses_request(body);
  const json want = json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Need it.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "user", "content": "And tomorrow?"}],
    "model": "m", "temperature": 0.5, "stream": true, "max_completion_tokens": 50,
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"},
               "strict": true}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}},
    "chat_template_kwargs": {"enable_thinking": false, "thinking": false, "reasoning_effort": "none"}})");
  EXPECT_EQ(r.chat_body, want) << r.chat_body.dump(2);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_EQ(r.echo["max_output_tokens"], 50);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  // The response lists the tools with the `parameters` and `strict` the spec requires there, and
  // `user` only when sent (the spec types it a string).
  EXPECT_EQ(r.echo["tools"], body["tools"]);
  EXPECT_FALSE(r.echo.contains("user"));
  const ResponsesRequest bare = parse_responses_request(
      json::parse(R"({"input": "x", "user": "u1", "tools": [{"type": "function", "name": "f"}]})"));
  EXPECT_EQ(bare.echo["tools"],
            json::parse(R"([{"type": "function", "name": "f", "parameters": null, "strict": null}])"));
  EXPECT_EQ(bare.echo["user"], "u1");
  // A string input is one user message.
  EXPECT_EQ(parse_responses_request(json::parse(R"({"input": "hi"})")).chat_body["messages"],
            json::parse(R"([{"role": "user", "content": "hi"}])"));
}

TEST(ResponsesProtocol, ErrorsNameTheField) {
  auto param = [](const char* text) {
    try {
      parse_responses_request(json::parse(text));
    } catch (const ApiError& e) {
      return e.to_json()["error"]["param"].get<std::string>() + ": " + e.what();
    }
    return std::string();
  };
  auto starts = [](const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; };
  EXPECT_TRUE(starts(param(R"({})"), "input: ")) << param(R"({})");
  EXPECT_TRUE(
      starts(param(R"({"input": [{"type": "web_search_call"}]})"), "input: input[0]: item type 'web_search_call'"));
  EXPECT_TRUE(starts(param(R"({"input": "x", "previous_response_id": "resp_1"})"), "previous_response_id: "));
  EXPECT_TRUE(starts(param(R"({"input": "x", "tools": [{"type": "file_search"}]})"), "tools: "));
  EXPECT_TRUE(starts(param(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens: "));
  EXPECT_TRUE(starts(param(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), "text.format: "));
  EXPECT_TRUE(starts(param(R"({"input": "x", "reasoning": {"effort": "max"}})"), "reasoning: "));
  EXPECT_TRUE(starts(param(R"({"input": [{"type": "function_call", "name": "f"}]})"), "input: input[0] needs"));
  EXPECT_EQ(param(R"({"input": "x", "store": false, "background": false})"), "");
}

}  // namespace
}  // namespace mla::server
