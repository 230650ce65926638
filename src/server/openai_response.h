#pragma once
// The OpenAI shapes of a job's output (a ResponseWriter each): /v1/completions and
// /v1/chat/completions, streamed as SSE chunks (`data: {json}`, then `data: [DONE]`) or as one
// JSON response; errors as {"error": {...}}.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/generation_job.h"
#include "server/openai_protocol.h"

namespace mla::server {

struct OpenAiResponseOptions {
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model name
  int n = 1;            // sequences per prompt
  bool stream = false;
  bool include_usage = false;  // stream: a last chunk with the usage
  bool logprobs = false;
  TokenTextFn token_text;  // a token's text in logprobs
};

// What both endpoints write alike: the chunk's frame, the end of a stream, errors.
class OpenAiWriter : public ResponseWriter {
 public:
  void stream_head(int64_t prompt_tokens, Events& out) override {}
  void stream_end(std::span<const ChoiceState> choices, const JobUsage& usage, Events& out) override;
  json error_json(const ApiError& e) const override { return e.to_json(); }
  void stream_error(const ApiError& e, Events& out) const override;

 protected:
  // The "object" of a streamed chunk and of a whole response ("chat.completion.chunk",
  // "chat.completion"); n_prompts x opt.n choices.
  OpenAiWriter(OpenAiResponseOptions opt, const char* stream_object, const char* object, size_t n_prompts)
      : opt_(std::move(opt)),
        gathered_(n_prompts * static_cast<size_t>(opt_.n)),
        object_(opt_.stream ? stream_object : object) {}
  json chunk_base() const;
  // body's frame: chunk_base() with the choices and the usage.
  json response(json choices, const JobUsage& usage) const;

  // What a whole response gathers of one choice.
  // NOLINTNEXTLINE(bugprone-exception-escape): the implicit moves of its string and json do not throw
  struct Gathered {
    std::string text;
    json logprobs;  // null until the first logprobs
  };
  const OpenAiResponseOptions opt_;
  std::vector<Gathered> gathered_;  // not streaming: per choice

 private:
  const char* object_;
};

// What a completion shows of its prompts.
struct CompletionPrompts {
  std::vector<std::string> texts;         // per prompt
  std::vector<std::vector<int32_t>> ids;  // per prompt (the engine's prompt tokens)
  bool echo = false;                      // each choice starts with its prompt's text
  std::optional<int> echo_logprobs;       // echo with logprobs k: the prompt's tokens lead the logprobs
  std::optional<int> prompt_logprobs;     // each choice's "prompt_logprobs" (vLLM), top k
};

// /v1/completions.
class CompletionWriter final : public OpenAiWriter {
 public:
  CompletionWriter(OpenAiResponseOptions opt, CompletionPrompts prompts);
  void prompt_logprobs(size_t prompt, std::vector<SampleLogprobs> lps) override;
  void output(size_t choice, const CompletionOutput& o, bool first, Events& out) override;
  json body(std::span<const ChoiceState> choices, const JobUsage& usage) override;

 private:
  // The choice's logprobs before its first token: the echoed prompt's, or null.
  json echoed_logprobs(size_t choice) const;

  const CompletionPrompts prompts_;
  std::vector<std::vector<SampleLogprobs>> prompt_lps_;  // per prompt, once the engine gave them
  std::vector<int64_t> text_offsets_;  // per choice: where its next token's text starts, in code points
};

// /v1/chat/completions, with the reasoning and tool calls parsed out of the text.
class ChatWriter final : public OpenAiWriter {
 public:
  // named_tool_choice: tool_choice named a function, so the call is the answer and
  // finish_reason stays "stop" (as OpenAI and vLLM); otherwise a parsed call makes a stopped
  // choice "tool_calls".
  // prompt_logprobs: the response's "prompt_logprobs" (vLLM) for `prompt`, top k.
  ChatWriter(OpenAiResponseOptions opt, OutputParsing parsing, bool named_tool_choice,
             std::optional<int> prompt_logprobs = std::nullopt, std::vector<int32_t> prompt = {});
  void prompt_logprobs(size_t prompt, std::vector<SampleLogprobs> lps) override;
  void output(size_t choice, const CompletionOutput& o, bool first, Events& out) override;
  json body(std::span<const ChoiceState> choices, const JobUsage& usage) override;

 private:
  // The delta of a parsed stream; finish becomes "tool_calls" when a call ended the choice.
  json parsed_delta(std::optional<ChatOutputStream>& parser, const CompletionOutput& o, json& finish) const;
  json message(const std::string& text, const ChoiceState& state, json& finish) const;

  const OutputParsing parsing_;
  const bool named_tool_choice_;
  const std::optional<int> prompt_logprobs_k_;
  const std::vector<int32_t> prompt_;
  std::vector<SampleLogprobs> prompt_lps_;
  std::vector<std::optional<ChatOutputStream>> parsers_;  // streaming with parsing: per choice
};

}  // namespace mla::server
