// Request validation (JSON → SamplingParams, 400s naming the field), SSE framing, Prometheus
// text formatting and the API key check. The rules come from the OpenAI API reference, vLLM's
// documented ranges and the Prometheus text exposition format (version 0.0.4).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "server/anthropic_protocol.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/sse.h"

namespace mla::server {
namespace {

const ModelLimits kLimits{1000, 256};

CompletionRequest completion(const std::string& body) { return parse_completion_request(json::parse(body), kLimits); }

// The 400 a body gets, as "param: message".
std::string completion_error(const std::string& body) {
  try {
    completion(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param() + ": " + e.what();
  }
  return "no error";
}

std::string chat_error(const std::string& body) {
  try {
    parse_chat_request(json::parse(body), kLimits);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param() + ": " + e.what();
  }
  return "no error";
}

TEST(ServerProtocol, CompletionDefaultsFollowTheOpenAiApi) {
  CompletionRequest r = completion(R"({"model": "m", "prompt": "Hello"})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].text, "Hello");
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 1.0f);
  EXPECT_FALSE(r.params.logprobs.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.echo);
}

TEST(ServerProtocol, CompletionFieldsReachSamplingParams) {
  CompletionRequest r = completion(R"({
    "prompt": [[1, 2], [3]], "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
    "min_p": 0.1, "n": 3, "seed": 42, "stop": ["a", "bc"], "stop_token_ids": [7],
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "logit_bias": {"5": -100, "6": 2.5}, "logprobs": 2, "ignore_eos": true, "min_tokens": 2,
    "stream": true, "stream_options": {"include_usage": true}, "user": "u",
    "unknown_field": {"is": "ignored"}})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{3}));
  const SamplingParams& p = r.params;
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 0);  // -1 is "off"
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{7}));
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  ASSERT_EQ(p.logit_bias.size(), 2u);
  EXPECT_EQ(p.logit_bias[0], (std::pair<int32_t, float>{5, -100.0f}));
  EXPECT_EQ(p.logit_bias[1], (std::pair<int32_t, float>{6, 2.5f}));
  EXPECT_EQ(p.logprobs, 2);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "u");
  EXPECT_NO_THROW(p.validate(kLimits.n_vocab));
}

TEST(ServerProtocol, PromptShapes) {
  EXPECT_EQ(completion(R"({"prompt": ["a", "b"]})").prompts.size(), 2u);
  EXPECT_EQ(completion(R"({"prompt": [5, 6, 7]})").prompts[0].ids.size(), 3u);
  EXPECT_EQ(completion(R"({"prompt": "x", "stop": "y"})").params.stop, (std::vector<std::string>{"y"}));
  // null means "not given".
  EXPECT_EQ(completion(R"({"prompt": "x", "max_tokens": null, "temperature": null})").params.max_tokens, 16);
  // An integral float is an integer (as pydantic accepts it).
  EXPECT_EQ(completion(R"({"prompt": "x", "max_tokens": 4.0})").params.max_tokens, 4);
}

TEST(ServerProtocol, BadCompletionFieldsAre400sNamingTheField) {
  EXPECT_EQ(completion_error(R"({"max_tokens": 4})"), "prompt: 'prompt' is required");
  EXPECT_EQ(completion_error(R"({"prompt": 5})").rfind("prompt: 'prompt' must be", 0), 0u);
  EXPECT_EQ(completion_error(R"({"prompt": []})"), "prompt: 'prompt' must not be an empty list");
  EXPECT_EQ(completion_error(R"({"prompt": [[]]})"), "prompt: 'prompt' token lists must not be empty");
  EXPECT_EQ(completion_error(R"({"prompt": [1, 1000]})"), "prompt: 'prompt': token id 1000 is out of range [0, 1000)");
  EXPECT_EQ(completion_error(R"({"prompt": [1, -1]})"), "prompt: 'prompt': token id -1 is out of range [0, 1000)");
  EXPECT_EQ(completion_error(R"({"prompt": ["a", 1]})").rfind("prompt: ", 0), 0u);
  EXPECT_EQ(completion_error(R"({"prompt": "x", "temperature": -0.1})"),
            "temperature: 'temperature' must be >= 0, got -0.1");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "temperature": "hot"})"),
            "temperature: 'temperature' must be a number, got string");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "top_p": 0})"), "top_p: 'top_p' must be in (0, 1], got 0");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "top_p": 1.5})"), "top_p: 'top_p' must be in (0, 1], got 1.5");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "n": 0})"), "n: 'n' must be in [1, 128], got 0");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "n": 1.5})"), "n: 'n' must be an integer, got number");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "logprobs": 21})"), "logprobs: 'logprobs' must be in [0, 20], got 21");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "max_tokens": 0})"),
            "max_tokens: 'max_tokens' must be >= 1 (0 only with 'echo', to score the prompt), got 0");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "top_k": -2})").rfind("top_k: ", 0), 0u);
  EXPECT_EQ(completion_error(R"({"prompt": "x", "min_p": 2})"), "min_p: 'min_p' must be in [0, 1], got 2");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "presence_penalty": 3})"),
            "presence_penalty: 'presence_penalty' must be in [-2, 2], got 3");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "frequency_penalty": -2.5})"),
            "frequency_penalty: 'frequency_penalty' must be in [-2, 2], got -2.5");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "repetition_penalty": 0})"),
            "repetition_penalty: 'repetition_penalty' must be > 0, got 0");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "stop": ""})"), "stop: 'stop' strings must not be empty");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "stop": [1]})").rfind("stop: ", 0), 0u);
  EXPECT_EQ(completion_error(R"({"prompt": "x", "stop_token_ids": [5000]})"),
            "stop_token_ids: 'stop_token_ids': token id 5000 is out of range [0, 1000)");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "logit_bias": {"abc": 1}})"),
            "logit_bias: 'logit_bias' keys must be token ids, got 'abc'");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "logit_bias": {"1": 101}})"),
            "logit_bias: 'logit_bias' must be in [-100, 100] for every token, got 101");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "logit_bias": {"1000": 1}})"),
            "logit_bias: 'logit_bias': token id 1000 is out of range [0, 1000)");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "stream": "yes"})"), "stream: 'stream' must be a boolean, got string");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "stream_options": {"include_usage": true}})"),
            "stream_options: 'stream_options' can only be given when 'stream' is true");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "min_tokens": 20})"),
            "min_tokens: 'min_tokens' (20) must not exceed 'max_tokens' (16)");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "model": 3})"), "model: 'model' must be a string, got number");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "seed": "1"})"), "seed: 'seed' must be an integer, got string");
}

// best_of as vLLM's V1 engine takes it: the OpenAI rule (best_of >= n) first, then nothing above 1.
TEST(ServerProtocol, BestOfIsCheckedAgainstNAndRefusedAboveOne) {
  EXPECT_EQ(completion_error(R"({"prompt": "x", "n": 3, "best_of": 2})"),
            "best_of: 'best_of' must be >= 'n', got best_of 2 and n 3");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "n": 2, "best_of": 2})"),
            "best_of: 'best_of' 2 is not supported (only 1: no candidates are generated to rank; use 'n')");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "best_of": 0})"), "best_of: 'best_of' must be in [1, 128], got 0");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "best_of": "2"})"),
            "best_of: 'best_of' must be an integer, got string");
  EXPECT_EQ(completion(R"({"prompt": "x", "best_of": 1})").params.n, 1);
  EXPECT_EQ(completion(R"({"prompt": "x", "best_of": null, "n": 2})").params.n, 2);
}

TEST(ServerProtocol, ChatMessagesAreNormalized) {
  ChatRequest r = parse_chat_request(json::parse(R"({
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "t1"}],
    "max_completion_tokens": 7, "max_tokens": 3, "logprobs": true, "top_logprobs": 4,
    "chat_template_kwargs": {"enable_thinking": false}})"),
                                     kLimits);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[3]["tool_call_id"], "t1");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 4);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(r.add_generation_prompt);

  ChatRequest d = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), kLimits);
  EXPECT_FALSE(d.max_tokens.has_value());  // the server fills in the rest of the context
  EXPECT_FALSE(d.params.logprobs.has_value());
}

TEST(ServerProtocol, BadChatRequestsAre400s) {
  EXPECT_EQ(chat_error(R"({})"), "messages: 'messages' is required");
  EXPECT_EQ(chat_error(R"({"messages": []})"), "messages: 'messages' must not be empty");
  EXPECT_EQ(chat_error(R"({"messages": "hi"})"), "messages: 'messages' must be a list of messages, got string");
  EXPECT_EQ(chat_error(R"({"messages": [{"content": "x"}]})"), "messages: messages[0] has no 'role' string");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "wizard", "content": "x"}]})"),
            "messages: messages[0].role 'wizard' is not one of system, developer, user, assistant, tool");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user"}]})"), "messages: messages[0] (user) has no 'content'");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages: messages[0].content part type 'image_url' is not supported (text only)");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"),
            "top_logprobs: 'top_logprobs' needs 'logprobs' to be true");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                           "top_logprobs": 21})"),
            "top_logprobs: 'top_logprobs' must be in [0, 20], got 21");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})"),
            "chat_template_kwargs: 'chat_template_kwargs' must be an object, got number");
}

TEST(ServerProtocol, ContextLengthErrorsSayBothNumbers) {
  try {
    check_context_length(300, 16, 256);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos);
  }
  try {
    check_context_length(250, 16, 256);  // 266 > 256: an error, as in vLLM
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "max_tokens");
    EXPECT_NE(std::string(e.what()).find("266"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos);
  }
  EXPECT_NO_THROW(check_context_length(240, 16, 256));
  EXPECT_NO_THROW(check_context_length(256, std::nullopt, 256));
}

TEST(ServerProtocol, InvalidJsonIs400) {
  for (const char* body : {"{", "[1, 2]", "\"x\"", "", "{\"a\": }"}) {
    try {
      parse_json_object(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.code(), "invalid_json");
    }
  }
}

// A number past double range is the parser's out_of_range, not a syntax error: still a 400.
TEST(ServerProtocol, NumberOverflowIs400) {
  try {
    parse_json_object(R"({"prompt": "x", "max_tokens": 1e999})");
    ADD_FAILURE() << "accepted 1e999";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "invalid_json");
  }
}

// Nesting is bounded before parsing (the JSON library recurses per level when it copies or
// prints); brackets inside strings do not count.
TEST(ServerProtocol, NestingDeeperThanTheLimitIs400) {
  auto nested = [](int depth) { return "{\"a\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}"; };
  EXPECT_EQ(json_nesting_depth(nested(kMaxJsonDepth)), kMaxJsonDepth);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{\"[[", "b": [{}]})"), 3);
  EXPECT_NO_THROW(parse_json_object(nested(kMaxJsonDepth)));
  for (int depth : {kMaxJsonDepth + 1, 30000}) {
    try {
      parse_json_object(nested(depth));
      ADD_FAILURE() << "accepted depth " << depth;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.code(), "invalid_json");
      EXPECT_NE(std::string(e.what()).find(std::to_string(kMaxJsonDepth)), std::string::npos) << e.what();
    }
  }
}

TEST(ServerProtocol, ErrorObjectHasTheOpenAiShape) {
  json j = ApiError(404, "no such model", "model", "model_not_found").to_json();
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  json k = ApiError(401, "bad key").to_json();
  EXPECT_TRUE(k["error"]["param"].is_null());
  EXPECT_EQ(k["error"]["type"], "authentication_error");
}

TEST(ServerSse, EventsAreOneDataLineEach) {
  json chunk = {{"text", "line one\nline two\r\n"}, {"n", 1}};
  std::string ev = sse_event(chunk);
  ASSERT_EQ(ev.rfind("data: ", 0), 0u);
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  // Exactly one line feed pair, at the end: the payload's newlines are escaped.
  EXPECT_EQ(ev.find('\n'), ev.size() - 2);
  EXPECT_EQ(ev.find('\r'), std::string::npos);
  EXPECT_EQ(json::parse(ev.substr(6, ev.size() - 8)), chunk);
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ServerSse, InvalidUtf8IsReplacedNotThrown) {
  json j = {{"text", std::string("a\xff"
                                 "b")}};
  std::string out;
  ASSERT_NO_THROW(out = dump_json(j));
  EXPECT_EQ(json::parse(out)["text"],
            "a\xEF\xBF\xBD"
            "b");
}

TEST(ServerLogprobs, CompletionAndChatShapes) {
  std::vector<SampleLogprobs> lps(2);
  lps[0].sampled = {3, -0.5f};
  lps[0].top = {{3, -0.5f}, {4, -1.5f}};
  lps[1].sampled = {4, -std::numeric_limits<float>::infinity()};
  TokenTextFn text = [](int32_t id) { return TokenText{id == 3 ? std::string("h\xC3\xA9") : std::string("!"), "raw"}; };
  json c;
  int64_t offset = 5;
  append_completion_logprobs(c, lps, text, offset);
  EXPECT_EQ(c["tokens"], json::array({"h\xC3\xA9", "!"}));
  EXPECT_EQ(c["token_logprobs"][0], -0.5);
  EXPECT_EQ(c["token_logprobs"][1], -9999.0);        // -inf is not JSON
  EXPECT_EQ(c["text_offset"], json::array({5, 7}));  // "hé" is 2 code points
  EXPECT_EQ(offset, 8);
  EXPECT_EQ(c["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1], json::object());

  json ch;
  append_chat_logprobs(ch, lps, text);
  ASSERT_EQ(ch["content"].size(), 2u);
  EXPECT_EQ(ch["content"][0]["token"], "h\xC3\xA9");
  EXPECT_EQ(ch["content"][0]["bytes"], json::array({'r', 'a', 'w'}));
  EXPECT_EQ(ch["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(ch["content"][0]["top_logprobs"][1]["logprob"], -1.5);
}

TEST(ServerLogprobs, PromptShapes) {
  // Prompt [7, 3, 4]: entries for tokens 3 and 4 (the first token has none).
  std::vector<SampleLogprobs> lps(2);
  lps[0].sampled = {3, -0.5f};
  lps[0].rank = 1;
  lps[0].top = {{3, -0.5f}, {9, -1.5f}};
  lps[1].sampled = {4, -2.0f};
  lps[1].rank = 3;
  lps[1].top = {{9, -0.25f}, {8, -1.0f}};
  TokenTextFn text = [](int32_t id) { return TokenText{std::string(static_cast<size_t>(id % 3) + 1, 'x'), ""}; };
  const std::vector<int32_t> prompt = {7, 3, 4};
  json c;
  append_prompt_completion_logprobs(c, prompt, lps, 1, text);
  EXPECT_EQ(c["tokens"], json::array({"xx", "x", "xx"}));
  EXPECT_EQ(c["token_logprobs"], json::array({nullptr, -0.5, -2.0}));
  EXPECT_EQ(c["text_offset"], json::array({0, 2, 3}));
  EXPECT_TRUE(c["top_logprobs"][0].is_null());
  EXPECT_EQ(c["top_logprobs"][2], json({{"x", -0.25}}));  // k = 1 of the two
  // The completion's tokens follow in the same arrays.
  int64_t offset = 3;
  append_completion_logprobs(c, {lps[0]}, text, offset);
  EXPECT_EQ(c["tokens"].size(), 4u);

  json p = prompt_logprobs_json(prompt, lps, 2, text);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_TRUE(p[0].is_null());
  EXPECT_EQ(p[1].size(), 2u);  // token 3 is its own top entry
  EXPECT_EQ(p[2].size(), 3u);  // token 4 (rank 3) and the two above it
  EXPECT_EQ(p[2]["4"]["rank"], 3);
  EXPECT_EQ(p[2]["4"]["logprob"], -2.0);
  EXPECT_EQ(p[2]["9"]["rank"], 1);
  EXPECT_EQ(p[2]["8"]["decoded_token"], "xxx");
}

TEST(ServerProtocol, PromptLogprobFieldsReachSamplingParams) {
  CompletionRequest r = completion(R"({"prompt": "x", "echo": true, "logprobs": 2, "max_tokens": 0})");
  EXPECT_EQ(r.params.max_tokens, 0);
  EXPECT_EQ(r.params.prompt_logprobs, 2);
  EXPECT_FALSE(r.prompt_logprobs);
  r = completion(R"({"prompt": "x", "echo": true, "logprobs": 1, "prompt_logprobs": 5})");
  EXPECT_EQ(r.params.prompt_logprobs, 5);  // computed once with the larger k; each use takes its own
  EXPECT_EQ(r.prompt_logprobs, 5);
  EXPECT_FALSE(completion(R"({"prompt": "x", "echo": true})").params.prompt_logprobs);
  EXPECT_FALSE(completion(R"({"prompt": "x", "logprobs": 3})").params.prompt_logprobs);
}

// --- Prometheus text format -------------------------------------------------------------------

// Checks every line against the text format grammar and returns the samples by series.
std::map<std::string, double> parse_prometheus(const std::string& text) {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? ([-+0-9.eEInfNa]+))");
  std::map<std::string, double> out;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) continue;
    if (std::regex_match(line, m, kType)) {
      EXPECT_EQ(types.count(m[1]), 0u) << "TYPE twice: " << line;
      types[m[1]] = m[2];
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, kSample)) << "bad line: " << line;
    std::string name = m[1];
    std::string family = name;
    for (const char* suf : {"_bucket", "_sum", "_count"})
      if (!types.count(family) && name.size() > strlen(suf) &&
          name.compare(name.size() - strlen(suf), strlen(suf), suf) == 0)
        family = name.substr(0, name.size() - strlen(suf));
    EXPECT_TRUE(types.count(family)) << "sample before its TYPE: " << line;
    const size_t sp = line.rfind(' ');
    const std::string v = line.substr(sp + 1);
    out[line.substr(0, sp)] = v == "+Inf" ? INFINITY : std::stod(v);
  }
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  return out;
}

TEST(ServerMetricsText, ValuesAndEscapes) {
  EXPECT_EQ(prometheus_value(3), "3");
  EXPECT_EQ(prometheus_value(0.25), "0.25");
  EXPECT_EQ(prometheus_value(INFINITY), "+Inf");
  EXPECT_EQ(prometheus_value(-INFINITY), "-Inf");
  EXPECT_EQ(prometheus_value(NAN), "NaN");
  EXPECT_EQ(prometheus_escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

// A message that quotes a request's value stays one line: control characters are escaped (the
// request fuzzer's finding: an Anthropic role "assist\nt" gave a two-line message).
TEST(ServerProtocol, ErrorsQuotingAValueWithControlCharactersStayOneLine) {
  auto message = [](auto&& parse) {
    try {
      parse();
    } catch (const ApiError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string role = message([] {
    parse_anthropic_request(json::parse(R"({"max_tokens": 8, "messages": [{"role": "assist\nt", "content": "x"}]})"),
                            kLimits, false);
  });
  EXPECT_EQ(role, R"(messages[0].role must be "user" or "assistant", got "assist\nt")");
  const std::string choice =
      message([] { parse_tool_options(json::parse(R"({"tool_choice": "a\r\tb\u0001"})"), json::array()); });
  EXPECT_NE(choice.find(R"(got "a\r\tb\x01")"), std::string::npos) << choice;
  const std::string bias = chat_error(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1\n2": 1}})");
  EXPECT_EQ(bias.find('\n'), std::string::npos) << bias;
  EXPECT_NE(bias.find(R"('1\n2')"), std::string::npos) << bias;
  EXPECT_EQ(one_line("tab\there\x7f"), R"(tab\there\x7f)");
}

TEST(ServerMetricsText, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.observe(v);
  auto s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));  // le is inclusive
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 55.65);
  PrometheusWriter w;
  w.family("x_seconds", "histogram", "help");
  w.histogram("x_seconds", {{"model_name", "m"}}, s);
  auto samples = parse_prometheus(w.text());
  EXPECT_EQ(samples.at(R"(x_seconds_bucket{model_name="m",le="0.1"})"), 2);
  EXPECT_EQ(samples.at(R"(x_seconds_bucket{model_name="m",le="+Inf"})"), 5);
  EXPECT_EQ(samples.at(R"(x_seconds_count{model_name="m"})"), 5);
}

TEST(ServerMetricsText, EveryMetricOfTheIssueIsExposed) {
  ServerMetrics m;
  m.observe_ttft(0.02);
  m.observe_tpot(0.002);
  m.observe_e2e(0.3);
  EngineCounters c;
  c.n_running = 2;
  c.n_waiting = 1;
  c.kv_usage = 0.125;
  c.n_prompt_tokens = 10;
  c.n_generation_tokens = 20;
  c.n_preemptions = 3;
  c.n_prefix_queries = 40;
  c.n_prefix_hits = 16;
  c.n_tokens_mha = 7;
  c.n_tokens_mqa = 9;
  c.n_finished_length = 2;
  c.n_finished_stop = 1;
  auto s = parse_prometheus(m.render(c, "my \"model\""));
  const std::string l = R"({model_name="my \"model\""})";
  EXPECT_EQ(s.at("mla:num_requests_running" + l), 2);
  EXPECT_EQ(s.at("mla:num_requests_waiting" + l), 1);
  EXPECT_EQ(s.at("mla:kv_cache_usage_perc" + l), 0.125);
  EXPECT_EQ(s.at("mla:prompt_tokens_total" + l), 10);
  EXPECT_EQ(s.at("mla:generation_tokens_total" + l), 20);
  EXPECT_EQ(s.at("mla:num_preemptions_total" + l), 3);
  EXPECT_EQ(s.at("mla:prefix_cache_queries_total" + l), 40);
  EXPECT_EQ(s.at("mla:prefix_cache_hits_total" + l), 16);
  const std::string m0 = R"(model_name="my \"model\"")";
  EXPECT_EQ(s.at("mla:request_success_total{" + m0 + R"(,finished_reason="length"})"), 2);
  EXPECT_EQ(s.at("mla:request_success_total{" + m0 + R"(,finished_reason="stop"})"), 1);
  EXPECT_EQ(s.at("mla:request_success_total{" + m0 + R"(,finished_reason="abort"})"), 0);
  EXPECT_EQ(s.at("mla:attention_path_tokens_total{" + m0 + R"(,path="mha"})"), 7);
  EXPECT_EQ(s.at("mla:attention_path_tokens_total{" + m0 + R"(,path="mqa"})"), 9);
  for (const char* h :
       {"mla:time_to_first_token_seconds", "mla:time_per_output_token_seconds", "mla:e2e_request_latency_seconds"}) {
    EXPECT_EQ(s.at(std::string(h) + "_count" + l), 1) << h;
    EXPECT_EQ(s.at(std::string(h) + "_bucket{" + m0 + R"(,le="+Inf"})"), 1) << h;
  }
}

// --- API key ------------------------------------------------------------------------------------

TEST(ServerAuth, BearerKeyMustMatchExactly) {
  EXPECT_TRUE(constant_time_equals("secret", "secret"));
  EXPECT_FALSE(constant_time_equals("secreT", "secret"));
  EXPECT_FALSE(constant_time_equals("secret1", "secret"));
  EXPECT_FALSE(constant_time_equals("secre", "secret"));
  EXPECT_FALSE(constant_time_equals("", "secret"));
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_TRUE(authorized("Bearer secret", "secret"));
  EXPECT_TRUE(authorized("bearer secret", "secret"));
  EXPECT_FALSE(authorized("Bearer secrets", "secret"));
  EXPECT_FALSE(authorized("Basic secret", "secret"));
  EXPECT_FALSE(authorized("secret", "secret"));
  EXPECT_FALSE(authorized("", "secret"));
  EXPECT_TRUE(authorized("", ""));  // no key configured
}

}  // namespace
}  // namespace mla::server
