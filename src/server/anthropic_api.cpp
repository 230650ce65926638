// The Anthropic Messages API (see anthropic_api.h).
#include "server/anthropic_api.h"

#include <fmt/format.h>

#include "engine/engine.h"
#include "server/openai_api.h"
#include "server/sse.h"
#include "util/log.h"

namespace mla::server {

AnthropicJob::AnthropicJob(OpenAiApi& api, std::shared_ptr<HttpResponder> res, std::string id, bool stream,
                           OutputParsing parsing, int prompt_tokens)
    : api_(api),
      res_(std::move(res)),
      id_(std::move(id)),
      stream_(stream),
      parsing_(std::move(parsing)),
      prompt_tokens_(prompt_tokens) {}

json AnthropicJob::message_base() const {
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", api_.config().served_model_name},
          {"content", json::array()},
          {"stop_reason", nullptr},
          {"stop_sequence", nullptr}};
}

void AnthropicJob::emit(std::string_view event, const json& data) {
  std::string bytes = fmt::format("event: {}\ndata: {}\n\n", event, dump_json(data));
  if (begun_)
    res_->write(std::move(bytes));
  else
    pending_.push_back(std::move(bytes));
}

void AnthropicJob::begin() {
  std::lock_guard lk(mu_);
  if (begun_ || failed_) return;
  begun_ = true;
  if (stream_) {
    res_->start_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
    json start = message_base();
    start["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}};
    res_->write(
        fmt::format("event: message_start\ndata: {}\n\n", dump_json({{"type", "message_start"}, {"message", start}})));
  }
  for (auto& b : pending_) res_->write(std::move(b));
  pending_.clear();
  if (pending_end_) res_->end_stream();
}

void AnthropicJob::open_block(const std::string& type, json block) {
  close_block();
  block_type_ = type;
  ++block_index_;
  emit("content_block_start", {{"type", "content_block_start"}, {"index", block_index_}, {"content_block", block}});
}

void AnthropicJob::close_block() {
  if (block_type_.empty()) return;
  emit("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}});
  block_type_.clear();
}

void AnthropicJob::stream_delta(ChatDelta&& d) {
  auto delta = [&](json body) {
    emit("content_block_delta", {{"type", "content_block_delta"}, {"index", block_index_}, {"delta", std::move(body)}});
  };
  if (!d.reasoning.empty()) {
    if (block_type_ != "thinking") open_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
  }
  if (!d.content.empty()) {
    if (block_type_ != "text") open_block("text", {{"type", "text"}, {"text", ""}});
    delta({{"type", "text_delta"}, {"text", d.content}});
  }
  for (auto& c : d.tool_calls) {
    if (!c.id.empty())
      open_block("tool_use", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}});
    if (!c.arguments.empty()) delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
  }
}

void AnthropicJob::on_output(size_t, RequestOutput&& out) {
  std::lock_guard lk(mu_);
  if (done_) return;
  const CompletionOutput* o = out.outputs.empty() ? nullptr : &out.outputs.front();
  auto seconds_since_start = [this] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  };
  if (o && !o->token_ids.empty() && !first_token_seen_) {
    first_token_seen_ = true;
    api_.metrics().observe_ttft(seconds_since_start());
  }
  if (out.finished) api_.metrics().observe_e2e(seconds_since_start());
  if (o) {
    n_generated_ = o->n_generated;
    if (stream_ && !failed_) {
      if (!parser_) parser_.emplace(parsing_);
      stream_delta(parser_->feed(o->text));
    } else {
      text_ += o->text;
    }
  }
  if (!out.finished) return;
  done_ = true;
  if (!out.error.empty()) {
    const ApiError err(out.error_status, "generation failed: " + out.error, "", "engine_error");
    if (stream_) {
      emit("error", anthropic_error_json(err));
      if (begun_)
        res_->end_stream();
      else
        pending_end_ = true;
    } else {
      res_->send(err.status(), "application/json", dump_json(anthropic_error_json(err)));
    }
  } else {
    finish(o ? *o : CompletionOutput{});
  }
  api_.job_finished(id_);
}

void AnthropicJob::finish(const CompletionOutput& o) {
  api_.metrics().count_finished(o.finish_reason.value_or(FinishReason::kAbort));
  json stop_sequence = nullptr;
  std::string stop_reason = "end_turn";
  if (o.finish_reason == FinishReason::kLength) stop_reason = "max_tokens";
  if (auto* s = std::get_if<std::string>(&o.stop_reason)) {
    stop_reason = "stop_sequence";
    stop_sequence = *s;
  }
  if (stream_) {
    if (!parser_) parser_.emplace(parsing_);
    stream_delta(parser_->finish());
    if (parser_->any_tool_call() && stop_reason == "end_turn") stop_reason = "tool_use";
    close_block();
    emit("message_delta", {{"type", "message_delta"},
                           {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}},
                           {"usage", {{"output_tokens", n_generated_}}}});
    emit("message_stop", {{"type", "message_stop"}});
    if (begun_)
      res_->end_stream();
    else
      pending_end_ = true;
    return;
  }
  ChatMessageOut m = parse_chat_output(parsing_, text_);
  json content = json::array();
  if (m.reasoning && !m.reasoning->empty())
    content.push_back({{"type", "thinking"}, {"thinking", *m.reasoning}, {"signature", ""}});
  if (!m.content.empty() || (m.tool_calls.empty() && content.empty()))
    content.push_back({{"type", "text"}, {"text", m.content}});
  for (const auto& c : m.tool_calls) {
    json input = json_depth_ok(c.arguments) ? json::parse(c.arguments, nullptr, false) : json::object();
    if (input.is_discarded() || !input.is_object()) input = json::object();
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}});
  }
  if (!m.tool_calls.empty() && stop_reason == "end_turn") stop_reason = "tool_use";
  json body = message_base();
  body["content"] = std::move(content);
  body["stop_reason"] = stop_reason;
  body["stop_sequence"] = stop_sequence;
  body["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", n_generated_}};
  res_->send(200, "application/json", dump_json(body));
}

void AnthropicJob::abort() {
  {
    std::lock_guard lk(mu_);
    if (done_) return;
  }
  api_.model().engine->abort(id_);
}

void AnthropicJob::fail_start(size_t, const ApiError& err) {
  std::lock_guard lk(mu_);
  failed_ = done_ = true;
  res_->send(err.status(), "application/json", dump_json(anthropic_error_json(err)));
  api_.job_finished(id_);
}

// ---------------------------------------------------------------------------------------------

void OpenAiApi::handle_messages(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  json body = parse_json_object(req.body);
  // Any model name is served (clients of this API ask for their own model names).
  AnthropicRequest ar = parse_anthropic_request(body, {model_.n_vocab, model_.max_model_len}, false);
  std::string text = render_chat(ar.messages, ar.tools, ar.chat_template_kwargs, !ar.continue_final_message,
                                 ar.continue_final_message);
  std::vector<int32_t> ids = tokenize_chat(text);
  const int len = static_cast<int>(ids.size());
  check_context_length(len, ar.params.max_tokens, model_.max_model_len);
  OutputParsing parsing = output_parsing(model_.parsers, ar.tools, ar.tool_options, ar.chat_template_kwargs, text);
  if (parsing.active()) ar.params.skip_special_tokens = false;
  if (ar.tool_options.requires_call()) constrain_to_tool_calls(ar.params, parsing, ar.tools, ar.tool_options);
  auto job = std::make_shared<AnthropicJob>(*this, res, make_tool_call_id("msg_"), ar.stream, std::move(parsing), len);
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::move(ids));
  start_job(std::move(job), std::move(prompts), ar.params);
}

void OpenAiApi::handle_count_tokens(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  json body = parse_json_object(req.body);
  AnthropicRequest ar = parse_anthropic_request(body, {model_.n_vocab, model_.max_model_len}, true);
  std::string text = render_chat(ar.messages, ar.tools, ar.chat_template_kwargs, !ar.continue_final_message,
                                 ar.continue_final_message);
  res->send(200, "application/json", dump_json({{"input_tokens", tokenize_chat(text).size()}}));
}

}  // namespace mla::server
