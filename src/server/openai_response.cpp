// The OpenAI shapes of a job's output (see openai_response.h).
#include "server/openai_response.h"

#include "server/sse.h"

namespace mla::server {

json OpenAiWriter::chunk_base() const {
  return {{"id", opt_.id}, {"object", object_}, {"created", opt_.created}, {"model", opt_.model}};
}

json OpenAiWriter::response(json choices, const JobUsage& usage) const {
  json body = chunk_base();
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(usage.prompt_tokens, usage.completion_tokens);
  return body;
}

void OpenAiWriter::stream_end(std::span<const ChoiceState>, const JobUsage& usage, Events& out) {
  if (opt_.include_usage) out.push_back(sse_event(response(json::array(), usage)));
  out.emplace_back(kSseDone);
}

void OpenAiWriter::stream_error(const ApiError& e, Events& out) const {
  out.push_back(sse_event(e.to_json()));
  out.emplace_back(kSseDone);
}

// ---------------------------------------------------------------------------------------------

CompletionWriter::CompletionWriter(OpenAiResponseOptions opt, CompletionPrompts prompts)
    : OpenAiWriter(std::move(opt), "text_completion", "text_completion", prompts.texts.size()),
      prompts_(std::move(prompts)),
      prompt_lps_(prompts_.texts.size()),
      text_offsets_(gathered_.size()) {
  if (prompts_.echo)
    for (size_t ci = 0; ci < text_offsets_.size(); ++ci) text_offsets_[ci] = utf8_length(prompts_.texts[ci / opt_.n]);
}

void CompletionWriter::prompt_logprobs(size_t prompt, std::vector<SampleLogprobs> lps) {
  if (prompt < prompt_lps_.size()) prompt_lps_[prompt] = std::move(lps);
}

json CompletionWriter::echoed_logprobs(size_t ci) const {
  json lp = nullptr;
  const size_t p = ci / opt_.n;
  if (prompts_.echo && prompts_.echo_logprobs)
    append_prompt_completion_logprobs(lp, prompts_.ids[p], prompt_lps_[p], *prompts_.echo_logprobs, opt_.token_text);
  return lp;
}

void CompletionWriter::output(size_t ci, const CompletionOutput& o, bool first, Events& out) {
  const std::string& prefix = prompts_.echo && first ? prompts_.texts[ci / opt_.n] : std::string();
  if (!opt_.stream) {
    Gathered& g = gathered_[ci];
    if (first) {
      g.text = prefix;
      g.logprobs = echoed_logprobs(ci);
    }
    g.text += o.text;
    if (opt_.logprobs) append_completion_logprobs(g.logprobs, o.logprobs, opt_.token_text, text_offsets_[ci]);
    return;
  }
  json logprobs = first ? echoed_logprobs(ci) : json(nullptr);
  if (opt_.logprobs && !o.logprobs.empty())
    append_completion_logprobs(logprobs, o.logprobs, opt_.token_text, text_offsets_[ci]);
  std::string text = prefix + o.text;
  if (text.empty() && !o.finish_reason && logprobs.is_null()) return;
  json chunk = chunk_base();
  chunk["choices"] = json::array({{{"index", ci},
                                   {"text", std::move(text)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", finish_reason_json(o.finish_reason)},
                                   {"stop_reason", stop_reason_json(o.stop_reason)}}});
  out.push_back(sse_event(chunk));
}

json CompletionWriter::body(std::span<const ChoiceState> states, const JobUsage& usage) {
  json choices = json::array();
  for (size_t ci = 0; ci < gathered_.size(); ++ci) {
    json choice = {{"index", ci}};
    choice["text"] = std::move(gathered_[ci].text);
    choice["logprobs"] = std::move(gathered_[ci].logprobs);
    choice["finish_reason"] = finish_reason_json(states[ci].finish);
    choice["stop_reason"] = stop_reason_json(states[ci].stop_reason);
    if (prompts_.prompt_logprobs) {
      const size_t p = ci / opt_.n;
      choice["prompt_logprobs"] =
          prompt_logprobs_json(prompts_.ids[p], prompt_lps_[p], *prompts_.prompt_logprobs, opt_.token_text);
    }
    choices.push_back(std::move(choice));
  }
  return response(std::move(choices), usage);
}

// ---------------------------------------------------------------------------------------------

ChatWriter::ChatWriter(OpenAiResponseOptions opt, OutputParsing parsing, bool named_tool_choice,
                       std::optional<int> prompt_logprobs, std::vector<int32_t> prompt)
    : OpenAiWriter(std::move(opt), "chat.completion.chunk", "chat.completion", 1),
      parsing_(std::move(parsing)),
      named_tool_choice_(named_tool_choice),
      prompt_logprobs_k_(prompt_logprobs),
      prompt_(std::move(prompt)),
      parsers_(gathered_.size()) {}

void ChatWriter::prompt_logprobs(size_t, std::vector<SampleLogprobs> lps) { prompt_lps_ = std::move(lps); }

json ChatWriter::parsed_delta(std::optional<ChatOutputStream>& parser, const CompletionOutput& o, json& finish) const {
  if (!parser) parser.emplace(parsing_);
  ChatDelta d = parser->feed(o.text);
  if (o.finish_reason) {
    ChatDelta rest = parser->finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
    if (parser->any_tool_call() && *o.finish_reason == FinishReason::kStop && !named_tool_choice_)
      finish = "tool_calls";
  }
  json delta = json::object();
  if (!d.reasoning.empty()) {  // both names: DeepSeek's API and older vLLM, newer vLLM
    delta["reasoning"] = d.reasoning;
    delta["reasoning_content"] = std::move(d.reasoning);
  }
  if (!d.content.empty()) delta["content"] = std::move(d.content);
  if (!d.tool_calls.empty()) delta["tool_calls"] = tool_call_deltas_json(d.tool_calls);
  return delta;
}

void ChatWriter::output(size_t ci, const CompletionOutput& o, bool first, Events& out) {
  if (!opt_.stream) {
    gathered_[ci].text += o.text;
    if (opt_.logprobs) append_chat_logprobs(gathered_[ci].logprobs, o.logprobs, opt_.token_text);
    return;
  }
  json logprobs = nullptr;
  if (opt_.logprobs && !o.logprobs.empty()) append_chat_logprobs(logprobs, o.logprobs, opt_.token_text);
  if (first) {
    json role = chunk_base();
    role["choices"] = json::array({{{"index", ci},
                                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", nullptr}}});
    out.push_back(sse_event(role));
  }
  json finish = finish_reason_json(o.finish_reason);
  json delta = json::object();
  if (parsing_.active())
    delta = parsed_delta(parsers_[ci], o, finish);
  else if (!o.text.empty())
    delta["content"] = o.text;
  if (delta.empty() && !o.finish_reason && logprobs.is_null()) return;
  json choice = {{"index", ci},
                 {"delta", std::move(delta)},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", std::move(finish)}};
  if (o.finish_reason) choice["stop_reason"] = stop_reason_json(o.stop_reason);
  json chunk = chunk_base();
  chunk["choices"] = json::array({std::move(choice)});
  out.push_back(sse_event(chunk));
}

// The spec requires `refusal` (null: the model never refuses through a separate channel here).
json ChatWriter::message(const std::string& text, const ChoiceState& state, json& finish) const {
  if (!parsing_.active()) return {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  ChatMessageOut m = parse_chat_output(parsing_, text);
  json msg = {{"role", "assistant"}};
  msg["content"] = m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(std::move(m.content));
  msg["refusal"] = nullptr;
  if (m.reasoning) {
    msg["reasoning"] = *m.reasoning;
    msg["reasoning_content"] = std::move(*m.reasoning);
  }
  if (!m.tool_calls.empty()) {
    msg["tool_calls"] = tool_calls_json(m.tool_calls);
    if (state.finish == FinishReason::kStop && !named_tool_choice_) finish = "tool_calls";
  }
  return msg;
}

json ChatWriter::body(std::span<const ChoiceState> states, const JobUsage& usage) {
  json choices = json::array();
  for (size_t ci = 0; ci < gathered_.size(); ++ci) {
    json finish = finish_reason_json(states[ci].finish);
    json choice = {{"index", ci}};
    choice["message"] = message(gathered_[ci].text, states[ci], finish);
    choice["logprobs"] = std::move(gathered_[ci].logprobs);
    choice["finish_reason"] = std::move(finish);
    choice["stop_reason"] = stop_reason_json(states[ci].stop_reason);
    choices.push_back(std::move(choice));
  }
  json r = response(std::move(choices), usage);
  if (prompt_logprobs_k_)
    r["prompt_logprobs"] = prompt_logprobs_json(prompt_, prompt_lps_, *prompt_logprobs_k_, opt_.token_text);
  return r;
}

}  // namespace mla::server
