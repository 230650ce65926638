// The OpenAI-compatible routes (see openai_api.h).
#include "server/openai_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "server/anthropic_api.h"
#include "server/generation_job.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/router.h"
#include "server/server_state.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace mla::server {
namespace {

using Responder = std::shared_ptr<HttpResponder>;

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    tok::Utf8Step st = tok::utf8_step(p + i, s.size() - i);
    if (st.kind != tok::Utf8Kind::VALID) return false;
    i += st.len;
  }
  return true;
}

// A token's text in logprobs: the one place the API reads a token's bytes.
TokenText token_text(const Tokenizer* tok, int32_t id) {
  TokenText t;
  if (!tok || !tok->is_valid(id)) return t;
  t.bytes = std::string(tok->token_bytes(id, /*render_special=*/true));
  if (valid_utf8(t.bytes)) {
    t.text = t.bytes;
  } else {
    t.text = "bytes:";
    for (unsigned char c : t.bytes) t.text += fmt::format("\\x{:02x}", c);
  }
  return t;
}

// Random hex for request ids, so ids do not repeat across restarts.
std::string random_hex(int n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  while (static_cast<int>(s.size()) < n) s += fmt::format("{:016x}", rng());
  return s.substr(0, n);
}

void check_model_name(const ServerState& state, const std::string& name) {
  const std::string& served = state.config().served_model_name;
  if (!name.empty() && name != served)
    throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", name, served), "model",
                   "model_not_found");
}

json model_card(const ServerState& state) {
  json card = {{"id", state.config().served_model_name}, {"object", "model"},
               {"created", state.started_at()},          {"owned_by", "mla.cpp"},
               {"root", state.config().model_path},      {"parent", nullptr}};
  if (state.ready()) card["max_model_len"] = state.model().max_model_len;
  return card;
}

OpenAiResponseOptions response_options(const ServerState& state, std::string id, int n, bool stream, bool include_usage,
                                       bool logprobs) {
  const Tokenizer* tok = state.model().tokenizer;
  return {std::move(id),
          unix_now(),
          state.config().served_model_name,
          n,
          stream,
          include_usage,
          logprobs,
          [tok](int32_t token) { return token_text(tok, token); }};
}

void handle_tokenize(const ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  json body = parse_json_object(req.body);
  TokenizeRequest tr = parse_tokenize_request(body);
  check_model_name(state, tr.model);
  if (tr.is_chat) prepare_assistant_messages(tr.messages);  // as /v1/chat/completions renders them
  std::string text = tr.is_chat ? render_chat(model, {tr.messages, tr.tools, tr.chat_template_kwargs,
                                                      tr.add_generation_prompt, tr.continue_final_message})
                                : tr.prompt;
  std::vector<int32_t> ids =
      tr.is_chat && !tr.add_special_tokens ? tokenize_chat(model, text) : tokenize(model, text, tr.add_special_tokens);
  send_json(*res, 200,
            {{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids}, {"token_strs", nullptr}});
}

void handle_detokenize(const ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  json body = parse_json_object(req.body);
  std::string name;
  std::vector<int32_t> ids = parse_detokenize_request(body, {model.n_vocab, model.max_model_len}, &name);
  check_model_name(state, name);
  send_json(*res, 200, {{"prompt", model.tokenizer->decode_text(ids)}});
}

// vLLM's GET /tokenizer_info (what lm-eval's remote tokenizer reads): the special tokens' texts,
// the chat template, the limits.
void handle_tokenizer_info(const ServerState& state, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  const Tokenizer& tok = *model.tokenizer;
  auto text_of = [&tok](TokenId id) { return tok.is_valid(id) ? json(std::string(tok.token_bytes(id))) : json(); };
  const Vocab& v = tok.vocab();
  send_json(*res, 200,
            {{"bos_token", text_of(v.bos)},
             {"eos_token", text_of(v.eos)},
             {"pad_token", text_of(v.pad)},
             {"unk_token", text_of(v.unk)},
             {"add_bos_token", tok.add_bos()},
             {"add_eos_token", tok.add_eos()},
             {"chat_template", model.chat_template.empty() ? json() : json(model.chat_template)},
             {"model_max_length", model.max_model_len},
             {"vocab_size", model.n_vocab}});
}

void handle_completions(ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  const ServedModel& model = state.model();
  json body = parse_json_object(req.body);
  CompletionRequest cr = parse_completion_request(body, {model.n_vocab, model.max_model_len});
  check_model_name(state, cr.model);
  if (cr.structured) cr.params.grammar = compile_grammar(model, cr.structured->spec, cr.structured->param);
  JobRequest job{"cmpl-" + random_hex(24), cr.stream, {}, cr.params};
  CompletionPrompts prompts;
  prompts.echo = cr.echo;
  prompts.prompt_logprobs = cr.prompt_logprobs;
  if (cr.echo) prompts.echo_logprobs = cr.params.logprobs;
  for (const auto& p : cr.prompts) {
    job.prompts.push_back(p.is_text ? tokenize(model, p.text, /*add_special=*/true) : p.ids);
    prompts.texts.push_back(p.is_text ? p.text : model.tokenizer->decode_text(p.ids));
    if (cr.params.prompt_logprobs) prompts.ids.push_back(job.prompts.back());
    check_context_length(static_cast<int>(job.prompts.back().size()), cr.params.max_tokens, model.max_model_len);
  }
  auto writer = std::make_unique<CompletionWriter>(
      response_options(state, job.id, cr.params.n, cr.stream, cr.include_usage, cr.params.logprobs.has_value()),
      std::move(prompts));
  GenerationJob::start(state.job_services(), res, std::move(job), std::move(writer));
}

// chat's max_tokens when the request gives none: the rest of the context (at least one token; a
// full prompt fails the context check before).
void default_max_tokens(ChatRequest& cr, int prompt_len, int max_model_len) {
  cr.params.max_tokens = std::max(1, max_model_len - prompt_len);
  check_context_length(prompt_len, cr.params.max_tokens, max_model_len);
  if (cr.params.min_tokens > cr.params.max_tokens)
    bad_request(fmt::format("'min_tokens' ({}) is more than the {} tokens left in the context", cr.params.min_tokens,
                            cr.params.max_tokens),
                "min_tokens");
}

void handle_chat(ServerState& state, const HttpRequest& req, const Responder& res) {
  state.require_ready();
  json body = parse_json_object(req.body);
  ChatRequest cr = parse_chat_request(body, {state.model().n_vocab, state.model().max_model_len});
  check_model_name(state, cr.model);
  PreparedChat chat = prepare_chat(state.model(), body, cr);
  JobRequest job{"chatcmpl-" + random_hex(24), cr.stream, {}, cr.params};
  std::vector<int32_t> prompt = cr.prompt_logprobs ? chat.ids : std::vector<int32_t>();
  job.prompts.push_back(std::move(chat.ids));
  auto writer = std::make_unique<ChatWriter>(
      response_options(state, job.id, cr.params.n, cr.stream, cr.include_usage, cr.logprobs), std::move(chat.parsing),
      chat.tool_options.choice == ToolChoice::kNamed, cr.prompt_logprobs, std::move(prompt));
  GenerationJob::start(state.job_services(), res, std::move(job), std::move(writer));
}

}  // namespace

PreparedChat prepare_chat(const ServedModel& model, const json& body, ChatRequest& cr) {
  PreparedChat out;
  out.tool_options = parse_tool_options(body, cr.tools);
  prepare_assistant_messages(cr.messages);
  if (cr.structured) cr.params.grammar = compile_grammar(model, cr.structured->spec, cr.structured->param);
  const std::string text = render_chat(
      model, {cr.messages, cr.tools, cr.chat_template_kwargs, cr.add_generation_prompt, cr.continue_final_message});
  out.ids = tokenize_chat(model, text);
  const int len = static_cast<int>(out.ids.size());
  check_context_length(len, cr.max_tokens, model.max_model_len);
  if (!cr.max_tokens) default_max_tokens(cr, len, model.max_model_len);
  out.parsing = output_parsing(model.parsers, cr.tools, out.tool_options, cr.chat_template_kwargs, text);
  if (out.tool_options.requires_call())
    constrain_to_tool_calls(model, cr.params, out.parsing, cr.tools, out.tool_options);
  // The markers of calls and reasoning may be special tokens: keep them in the text to parse.
  if (out.parsing.active() && !body.contains("skip_special_tokens")) cr.params.skip_special_tokens = false;
  return out;
}

void register_openai_routes(Router& router, ServerState& state) {
  // An Anthropic client (models.list(), models.retrieve()) gets its own shape.
  router.add("GET", "/v1/models", [&state](const HttpRequest& req, const Responder& res) {
    if (is_anthropic_request(req)) return send_anthropic_models(state, req, res);
    send_json(*res, 200, {{"object", "list"}, {"data", json::array({model_card(state)})}});
  });
  router.add_prefix("GET", "/v1/models/", [&state](const HttpRequest& req, const Responder& res) {
    if (is_anthropic_request(req)) return send_anthropic_models(state, req, res);
    check_model_name(state, req.path.substr(std::string_view("/v1/models/").size()));
    send_json(*res, 200, model_card(state));
  });
  router.add("POST", "/tokenize",
             [&state](const HttpRequest& req, const Responder& res) { handle_tokenize(state, req, res); });
  router.add("GET", "/tokenizer_info",
             [&state](const HttpRequest&, const Responder& res) { handle_tokenizer_info(state, res); });
  router.add("POST", "/detokenize",
             [&state](const HttpRequest& req, const Responder& res) { handle_detokenize(state, req, res); });
  router.add("POST", "/v1/completions",
             [&state](const HttpRequest& req, const Responder& res) { handle_completions(state, req, res); });
  router.add("POST", "/v1/chat/completions",
             [&state](const HttpRequest& req, const Responder& res) { handle_chat(state, req, res); });
}

}  // namespace mla::server
