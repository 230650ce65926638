// The Responses API shapes of a /v1/responses job's output (see responses_response.h).
#include "server/responses_response.h"

#include <fmt/format.h>

#include <utility>

#include "server/sse.h"

namespace mla::server {
namespace {

// An output_text part. The spec requires `logprobs`; this API takes no logprobs request, so the
// list is empty, as in the output_text events.
json output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json message_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (std::string_view(status) == "completed") content.push_back(output_text_part(text));
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (std::string_view(status) == "completed") content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", content}, {"status", status}};
}

json function_call_item(const std::string& id, const std::string& call_id, const std::string& name,
                        const std::string& arguments, const char* status) {
  return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
          {"arguments", arguments},  {"status", status}};
}

// An item's id: its kind's prefix and the response's id without "resp_".
std::string item_id(const char* prefix, const std::string& response_id, size_t index) {
  return fmt::format("{}{}_{}", prefix, response_id.substr(std::string_view("resp_").size()), index);
}

json usage_json(const ChoiceState* c, const JobUsage* usage, int64_t reasoning_tokens) {
  if (!c || !usage) return nullptr;
  return {{"input_tokens", usage->prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage->cached_tokens}}},
          {"output_tokens", c->n_generated},
          {"output_tokens_details", {{"reasoning_tokens", std::min<int64_t>(reasoning_tokens, c->n_generated)}}},
          {"total_tokens", usage->prompt_tokens + c->n_generated}};
}

bool ran_out(const ChoiceState& c) { return c.finish == FinishReason::kLength; }

}  // namespace

ResponsesWriter::ResponsesWriter(std::string id, int64_t created_at, std::string model, json echo, bool stream,
                                 OutputParsing parsing, std::function<int64_t(const std::string&)> count_tokens)
    : id_(std::move(id)),
      created_at_(created_at),
      model_(std::move(model)),
      echo_(std::move(echo)),
      count_tokens_(std::move(count_tokens)),
      output_(std::move(parsing), stream) {}

json ResponsesWriter::response(const std::string& status, json output, const ChoiceState* c,
                               const JobUsage* usage) const {
  json r = {{"id", id_},        {"object", "response"},       {"created_at", created_at_},
            {"status", status}, {"error", nullptr},           {"incomplete_details", nullptr},
            {"model", model_},  {"output", std::move(output)}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (const auto& [key, value] : echo_.items()) r[key] = value;
  int64_t reasoning_tokens = 0;
  for (const auto& item : r["output"])
    if (item.value("type", "") == "reasoning" && count_tokens_)
      for (const auto& part : item.value("content", json::array()))
        reasoning_tokens += count_tokens_(part.value("text", ""));
  // Not known before the end: left out then (the spec's usage is an object, never null).
  if (json u = usage_json(c, usage, reasoning_tokens); !u.is_null()) r["usage"] = std::move(u);
  return r;
}

json ResponsesWriter::error_json(const ApiError& e) const { return e.to_json(); }

void ResponsesWriter::stream_error(const ApiError& e, Events& out) const {
  json err = e.to_json()["error"];
  json data = {{"type", "error"},
               {"code", err.value("code", json(nullptr))},
               {"message", e.what()},
               {"param", err.value("param", json(nullptr))},
               {"sequence_number", sequence_number_}};
  out.push_back(fmt::format("event: error\ndata: {}\n\n", dump_json(data)));
}

void ResponsesWriter::event(const std::string& type, json data, Events& out) {
  json e = {{"type", type}};
  for (auto& [key, value] : data.items()) e[key] = std::move(value);
  e["sequence_number"] = sequence_number_++;
  out.push_back(fmt::format("event: {}\ndata: {}\n\n", type, dump_json(e)));
}

void ResponsesWriter::stream_head(int64_t, Events& out) {
  event("response.created", {{"response", response("in_progress", json::array(), nullptr, nullptr)}}, out);
  event("response.in_progress", {{"response", response("in_progress", json::array(), nullptr, nullptr)}}, out);
}

void ResponsesWriter::open_item(json item, Events& out) {
  close_item(out);
  open_ = std::move(item);
  open_text_.clear();
  const size_t index = done_items_.size();
  event("response.output_item.added", {{"output_index", index}, {"item", open_}}, out);
  if (open_["type"] == "message")
    event("response.content_part.added",
          {{"item_id", open_["id"]}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part("")}},
          out);
}

void ResponsesWriter::append(const std::string& piece, Events& out) {
  if (piece.empty()) return;
  open_text_ += piece;
  const std::string type = open_["type"];
  json where = {{"item_id", open_["id"]}, {"output_index", done_items_.size()}};
  if (type == "function_call") {
    where["delta"] = piece;
    event("response.function_call_arguments.delta", std::move(where), out);
    return;
  }
  where["content_index"] = 0;
  where["delta"] = piece;
  if (type == "message") where["logprobs"] = json::array();
  event(type == "message" ? "response.output_text.delta" : "response.reasoning_text.delta", std::move(where), out);
}

void ResponsesWriter::close_item(Events& out) {
  if (open_.is_null()) return;
  const std::string type = open_["type"];
  const std::string id = open_["id"];
  const size_t index = done_items_.size();
  json where = {{"item_id", id}, {"output_index", index}};
  json item;
  if (type == "function_call") {
    where["name"] = open_["name"];
    where["arguments"] = open_text_;
    event("response.function_call_arguments.done", std::move(where), out);
    item = function_call_item(id, open_["call_id"], open_["name"], open_text_, "completed");
  } else if (type == "message") {
    where["content_index"] = 0;
    where["text"] = open_text_;
    where["logprobs"] = json::array();
    event("response.output_text.done", where, out);
    item = message_item(id, open_text_, "completed");
    where.erase("text");
    where.erase("logprobs");
    where["part"] = item["content"][0];
    event("response.content_part.done", std::move(where), out);
  } else {
    where["content_index"] = 0;
    where["text"] = open_text_;
    event("response.reasoning_text.done", std::move(where), out);
    item = reasoning_item(id, open_text_, "completed");
  }
  event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
  done_items_.push_back(std::move(item));
  open_ = nullptr;
}

void ResponsesWriter::stream_delta(ChatDelta&& d, Events& out) {
  auto open_type = [&] { return open_.is_null() ? std::string() : open_["type"].get<std::string>(); };
  if (!d.reasoning.empty()) {
    if (open_type() != "reasoning")
      open_item(reasoning_item(item_id("rs_", id_, done_items_.size() + !open_.is_null()), "", "in_progress"), out);
    append(d.reasoning, out);
  }
  if (!d.content.empty()) {
    if (open_type() != "message")
      open_item(message_item(item_id("msg_", id_, done_items_.size() + !open_.is_null()), "", "in_progress"), out);
    append(d.content, out);
  }
  for (auto& c : d.tool_calls) {
    if (!c.id.empty())
      open_item(function_call_item(item_id("fc_", id_, done_items_.size() + !open_.is_null()), c.id, c.name, "",
                                   "in_progress"),
                out);
    append(c.arguments, out);
  }
}

void ResponsesWriter::output(size_t, const CompletionOutput& o, bool, Events& out) {
  stream_delta(output_.feed(o.text), out);
}

void ResponsesWriter::stream_end(std::span<const ChoiceState> choices, const JobUsage& usage, Events& out) {
  stream_delta(output_.finish(), out);
  close_item(out);
  const ChoiceState& c = choices.front();
  const bool incomplete = ran_out(c);
  event(incomplete ? "response.incomplete" : "response.completed",
        {{"response", response(incomplete ? "incomplete" : "completed", done_items_, &c, &usage)}}, out);
}

json ResponsesWriter::body(std::span<const ChoiceState> choices, const JobUsage& usage) {
  ChatMessageOut m = output_.message();
  json output = json::array();
  if (m.reasoning && !m.reasoning->empty())
    output.push_back(reasoning_item(item_id("rs_", id_, output.size()), *m.reasoning, "completed"));
  if (!m.content.empty() || (m.tool_calls.empty() && output.empty()))
    output.push_back(message_item(item_id("msg_", id_, output.size()), m.content, "completed"));
  for (const auto& c : m.tool_calls)
    output.push_back(function_call_item(item_id("fc_", id_, output.size()), c.id, c.name, c.arguments, "completed"));
  const ChoiceState& c = choices.front();
  return response(ran_out(c) ? "incomplete" : "completed", std::move(output), &c, &usage);
}

}  // namespace mla::server
