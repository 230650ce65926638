#pragma once
// The Responses API shapes of a /v1/responses job's output (a ResponseWriter): one Response
// object whose `output` holds reasoning, message and function_call items, or streamed as the
// documented event sequence (each `event: TYPE` + `data: {json}` with a sequence_number):
// response.created, response.in_progress; per item response.output_item.added, then
// response.content_part.added / response.output_text.delta / response.output_text.done /
// response.content_part.done (message), response.reasoning_text.delta / .done (reasoning) or
// response.function_call_arguments.delta / .done (function_call), response.output_item.done;
// finally response.completed (or response.incomplete when max_output_tokens ran out). Errors
// take the default {"error": {...}} shape; on a started stream an `error` event.
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "server/chat_output.h"
#include "server/generation_job.h"

namespace mla::server {

// One prompt, one sequence.
class ResponsesWriter final : public ResponseWriter {
 public:
  // echo: the request fields the Response repeats (ResponsesRequest::echo).
  // count_tokens: the tokens of a text (usage's reasoning_tokens: the reasoning re-tokenized).
  ResponsesWriter(std::string id, int64_t created_at, std::string model, json echo, bool stream, OutputParsing parsing,
                  std::function<int64_t(const std::string&)> count_tokens);
  void stream_head(int64_t prompt_tokens, Events& out) override;
  void output(size_t choice, const CompletionOutput& o, bool first, Events& out) override;
  void stream_end(std::span<const ChoiceState> choices, const JobUsage& usage, Events& out) override;
  json body(std::span<const ChoiceState> choices, const JobUsage& usage) override;
  json error_json(const ApiError& e) const override;
  void stream_error(const ApiError& e, Events& out) const override;

 private:
  // The Response object with `output`; status "in_progress", "completed" or "incomplete".
  json response(const std::string& status, json output, const ChoiceState* c, const JobUsage* usage) const;
  void event(const std::string& type, json data, Events& out);
  void stream_delta(ChatDelta&& d, Events& out);
  void open_item(json item, Events& out);
  void append(const std::string& piece, Events& out);  // to the open item's text / arguments
  void close_item(Events& out);

  const std::string id_;
  const int64_t created_at_;
  const std::string model_;
  const json echo_;
  const std::function<int64_t(const std::string&)> count_tokens_;
  ChatOutputCollector output_;
  int64_t sequence_number_ = 0;
  json done_items_ = json::array();  // streamed items, finished
  json open_;                        // the item being streamed (null: none)
  std::string open_text_;            // its text, reasoning or arguments so far
};

}  // namespace mla::server
