// Routing, auth and the endpoints of the OpenAI-compatible API (see openai_api.h).
#include "server/openai_api.h"

#include <fmt/format.h>

#include <random>

#include "engine/engine.h"
#include "server/anthropic_api.h"
#include "server/auth.h"
#include "server/generation_job.h"
#include "server/sse.h"
#include "server/tool_choice.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/log.h"

namespace mla::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(const std::shared_ptr<HttpResponder>& res, int status, const json& body,
               std::vector<std::pair<std::string, std::string>> headers = {}) {
  res->send(status, "application/json", dump_json(body), std::move(headers));
}

void send_error(const std::shared_ptr<HttpResponder>& res, const ApiError& e,
                std::vector<std::pair<std::string, std::string>> headers = {}) {
  send_json(res, e.status(), e.to_json(), std::move(headers));
}

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

// Random hex for request ids, so ids do not repeat across restarts.
std::string random_hex(int n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  while (static_cast<int>(s.size()) < n) s += fmt::format("{:016x}", rng());
  return s.substr(0, n);
}

}  // namespace

OpenAiApi::OpenAiApi(ApiConfig config) : config_(std::move(config)), created_(unix_now()) {}

OpenAiApi::~OpenAiApi() = default;

void OpenAiApi::set_model(ServedModel model) {
  model_ = std::move(model);
  ready_ = true;
}

void OpenAiApi::begin_shutdown() { shutting_down_ = true; }

int OpenAiApi::n_active() const {
  std::lock_guard lk(jobs_mu_);
  return static_cast<int>(jobs_.size());
}

void OpenAiApi::abort_all() {
  std::vector<std::shared_ptr<ApiJob>> jobs;
  {
    std::lock_guard lk(jobs_mu_);
    for (auto& [id, w] : jobs_)
      if (auto j = w.lock()) jobs.push_back(std::move(j));
  }
  for (auto& j : jobs) j->abort();
}

void OpenAiApi::job_finished(const std::string& id) {
  std::lock_guard lk(jobs_mu_);
  jobs_.erase(id);
}

TokenText OpenAiApi::token_text(int32_t id) const {
  TokenText t;
  if (!model_.tokenizer || !model_.tokenizer->is_valid(id)) return t;
  t.bytes = std::string(model_.tokenizer->token_bytes(id, /*render_special=*/true));
  if (valid_utf8(t.bytes)) {
    t.text = t.bytes;
  } else {
    t.text = "bytes:";
    for (unsigned char c : t.bytes) t.text += fmt::format("\\x{:02x}", c);
  }
  return t;
}

void OpenAiApi::handle(HttpRequest&& req, const std::shared_ptr<HttpResponder>& res) {
  // Errors of the Anthropic routes take Anthropic's shape.
  const bool anthropic = req.path.rfind("/v1/messages", 0) == 0;
  auto fail = [&](const ApiError& e) {
    if (anthropic)
      send_json(res, e.status(), anthropic_error_json(e));
    else
      send_error(res, e);
  };
  try {
    route(req, res);
  } catch (const ApiError& e) {
    if (e.status() >= 500) log().warn("api: {} {}: {}", req.method, req.path, e.what());
    fail(e);
  } catch (const Error& e) {
    fail(ApiError(400, e.what()));
  } catch (const std::exception& e) {
    log().error("api: {} {}: internal error: {}", req.method, req.path, e.what());
    fail(ApiError(500, fmt::format("internal error: {}", e.what()), "", "internal_error"));
  }
}

void OpenAiApi::route(HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  struct Route {
    const char* path;
    const char* method;
  };
  static const Route kRoutes[] = {
      {"/health", "GET"},          {"/metrics", "GET"},
      {"/version", "GET"},         {"/v1/models", "GET"},
      {"/tokenize", "POST"},       {"/detokenize", "POST"},
      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
      {"/v1/messages", "POST"},    {"/v1/messages/count_tokens", "POST"},
  };
  const std::string& path = req.path;
  const bool public_path = path == "/health" || path == "/metrics";
  // Anthropic's clients send the key as x-api-key.
  if (!public_path && !config_.api_key.empty() && !authorized(req.header("Authorization"), config_.api_key) &&
      !(!req.header("x-api-key").empty() && constant_time_equals(req.header("x-api-key"), config_.api_key))) {
    throw ApiError(401,
                   "missing or invalid API key (send 'Authorization: Bearer <key>' or "
                   "'x-api-key: <key>')",
                   "", "invalid_api_key");
  }
  // /v1/models/{name}: the one route with a parameter.
  std::string model_id;
  const char* known_method = nullptr;
  for (const auto& r : kRoutes)
    if (path == r.path) known_method = r.method;
  constexpr std::string_view kModelsPrefix = "/v1/models/";
  if (!known_method && path.rfind(kModelsPrefix, 0) == 0 && path.size() > kModelsPrefix.size()) {
    known_method = "GET";
    model_id = path.substr(kModelsPrefix.size());
  }
  if (!known_method) throw ApiError(404, fmt::format("no route for {} {}", req.method, path), "", "not_found");
  if (req.method != known_method) {
    send_error(res,
               ApiError(405, fmt::format("method {} is not allowed for {} (use {})", req.method, path, known_method),
                        "", "method_not_allowed"),
               {{"Allow", known_method}});
    return;
  }

  if (path == "/health") {
    if (!ready_ || shutting_down_)
      throw ApiError(503, shutting_down_ ? "shutting down" : "the model is loading", "",
                     shutting_down_ ? "shutting_down" : "loading");
    res->send(200, "application/json", "{}");
    return;
  }
  if (path == "/metrics") {
    EngineCounters c;
    if (ready_) c = model_.engine->counters();
    res->send(200, std::string(kPrometheusContentType), metrics_.render(c, config_.served_model_name));
    return;
  }
  if (path == "/version") {
    send_json(res, 200, {{"version", MLA_VERSION}});
    return;
  }
  if (path == "/v1/models") {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_card()})}});
    return;
  }
  if (!model_id.empty()) {
    check_model_name(model_id);
    send_json(res, 200, model_card());
    return;
  }
  require_ready();
  if (path == "/tokenize") return handle_tokenize(req, res);
  if (path == "/detokenize") return handle_detokenize(req, res);
  if (path == "/v1/completions") return handle_completions(req, res);
  if (path == "/v1/chat/completions") return handle_chat(req, res);
  if (path == "/v1/messages") return handle_messages(req, res);
  if (path == "/v1/messages/count_tokens") return handle_count_tokens(req, res);
}

void OpenAiApi::require_ready() const {
  if (shutting_down_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  if (!ready_) throw ApiError(503, "the model is still loading; retry when /health is 200", "", "loading");
}

void OpenAiApi::check_model_name(const std::string& name) const {
  if (!name.empty() && name != config_.served_model_name)
    throw ApiError(
        404, fmt::format("the model '{}' does not exist (this server serves '{}')", name, config_.served_model_name),
        "model", "model_not_found");
}

json OpenAiApi::model_card() const {
  json card = {{"id", config_.served_model_name}, {"object", "model"},          {"created", created_},
               {"owned_by", "mla.cpp"},           {"root", config_.model_path}, {"parent", nullptr}};
  if (ready_) card["max_model_len"] = model_.max_model_len;
  return card;
}

std::vector<int32_t> OpenAiApi::tokenize(const std::string& text, bool add_special) const {
  EncodeOptions opt;
  opt.add_special = add_special;
  opt.parse_special = true;
  return model_.tokenizer->encode(text, opt);
}

std::vector<int32_t> OpenAiApi::tokenize_chat(const std::string& rendered) const {
  // Templates of models whose vocabulary says add_bos mostly write BOS themselves (DeepSeek's
  // do); some do not (the embedded tiny model's). BOS is prepended only when missing, so neither
  // kind ends up with none or with two.
  std::vector<int32_t> ids = tokenize(rendered, /*add_special=*/false);
  const Tokenizer& tok = *model_.tokenizer;
  const int32_t bos = tok.vocab().bos;
  if (tok.add_bos() && tok.is_valid(bos) && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

std::string OpenAiApi::render_chat(const json& messages, const json& tools, const json& kwargs,
                                   bool add_generation_prompt, bool continue_final_message) const {
  if (!model_.render_chat)
    bad_request("this model has no chat template; use /v1/completions", "messages", "no_chat_template");
  if (continue_final_message && string_or_empty(messages.back(), "role") != "assistant")
    bad_request("'continue_final_message' needs the last message to be from the assistant", "continue_final_message");
  try {
    return model_.render_chat(ChatPromptInput{messages, tools, kwargs, add_generation_prompt, continue_final_message});
  } catch (const Error& e) {
    bad_request(fmt::format("chat template: {}", e.what()), "messages", "chat_template_error");
  }
}

void OpenAiApi::handle_tokenize(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  json body = parse_json_object(req.body);
  TokenizeRequest tr = parse_tokenize_request(body);
  check_model_name(tr.model);
  if (tr.is_chat) prepare_assistant_messages(tr.messages);  // as /v1/chat/completions renders them
  std::string text = tr.is_chat ? render_chat(tr.messages, tr.tools, tr.chat_template_kwargs, tr.add_generation_prompt,
                                              tr.continue_final_message)
                                : tr.prompt;
  std::vector<int32_t> ids =
      tr.is_chat && !tr.add_special_tokens ? tokenize_chat(text) : tokenize(text, tr.add_special_tokens);
  send_json(res, 200,
            {{"count", ids.size()}, {"max_model_len", model_.max_model_len}, {"tokens", ids}, {"token_strs", nullptr}});
}

void OpenAiApi::handle_detokenize(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  json body = parse_json_object(req.body);
  std::string model;
  std::vector<int32_t> ids = parse_detokenize_request(body, {model_.n_vocab, model_.max_model_len}, &model);
  check_model_name(model);
  send_json(res, 200, {{"prompt", model_.tokenizer->decode_text(ids)}});
}

void OpenAiApi::handle_completions(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  json body = parse_json_object(req.body);
  CompletionRequest cr = parse_completion_request(body, {model_.n_vocab, model_.max_model_len});
  check_model_name(cr.model);
  if (cr.structured) cr.params.grammar = compile_grammar(cr.structured->spec, cr.structured->param);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;
  std::vector<int> lens;
  for (const auto& p : cr.prompts) {
    prompts.push_back(p.is_text ? tokenize(p.text, /*add_special=*/true) : p.ids);
    texts.push_back(p.is_text ? p.text : model_.tokenizer->decode_text(p.ids));
    lens.push_back(static_cast<int>(prompts.back().size()));
    check_context_length(lens.back(), cr.params.max_tokens, model_.max_model_len);
  }
  GenerationJob::Options opt;
  opt.kind = GenerationJob::Kind::kCompletion;
  opt.id = "cmpl-" + random_hex(24);
  opt.created = unix_now();
  opt.n = cr.params.n;
  opt.stream = cr.stream;
  opt.include_usage = cr.include_usage;
  opt.logprobs = cr.params.logprobs.has_value();
  opt.echo = cr.echo;
  auto job = std::make_shared<GenerationJob>(*this, res, std::move(opt), std::move(texts), std::move(lens));
  start_job(job, std::move(prompts), cr.params);
}

void OpenAiApi::handle_chat(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  json body = parse_json_object(req.body);
  ChatRequest cr = parse_chat_request(body, {model_.n_vocab, model_.max_model_len});
  check_model_name(cr.model);
  const ChatToolOptions tool_opts = parse_tool_options(body, cr.tools);
  prepare_assistant_messages(cr.messages);
  if (cr.structured) cr.params.grammar = compile_grammar(cr.structured->spec, cr.structured->param);
  std::string text =
      render_chat(cr.messages, cr.tools, cr.chat_template_kwargs, cr.add_generation_prompt, cr.continue_final_message);
  std::vector<int32_t> ids = tokenize_chat(text);
  const int len = static_cast<int>(ids.size());
  check_context_length(len, cr.max_tokens, model_.max_model_len);
  if (!cr.max_tokens) {
    // Default: the rest of the context (at least one token; a full prompt fails just above).
    cr.params.max_tokens = std::max(1, model_.max_model_len - len);
    check_context_length(len, cr.params.max_tokens, model_.max_model_len);
    if (cr.params.min_tokens > cr.params.max_tokens)
      bad_request(fmt::format("'min_tokens' ({}) is more than the {} tokens left in the context", cr.params.min_tokens,
                              cr.params.max_tokens),
                  "min_tokens");
  }
  GenerationJob::Options opt;
  opt.kind = GenerationJob::Kind::kChat;
  opt.id = "chatcmpl-" + random_hex(24);
  opt.created = unix_now();
  opt.n = cr.params.n;
  opt.stream = cr.stream;
  opt.include_usage = cr.include_usage;
  opt.logprobs = cr.logprobs;
  opt.parsing = output_parsing(model_.parsers, cr.tools, tool_opts, cr.chat_template_kwargs, text);
  opt.named_tool_choice = tool_opts.choice == ToolChoice::kNamed;
  if (tool_opts.requires_call()) constrain_to_tool_calls(cr.params, opt.parsing, cr.tools, tool_opts);
  // The markers of calls and reasoning may be special tokens: keep them in the text to parse.
  if (opt.parsing.active() && !body.contains("skip_special_tokens")) cr.params.skip_special_tokens = false;
  auto job = std::make_shared<GenerationJob>(*this, res, std::move(opt), std::vector<std::string>{std::move(text)},
                                             std::vector<int>{len});
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::move(ids));
  start_job(job, std::move(prompts), cr.params);
}

std::shared_ptr<const CompiledGrammar> OpenAiApi::compile_grammar(const GrammarSpec& spec,
                                                                  const std::string& param) const {
  if (!model_.grammars) bad_request("structured outputs are not available on this server", param, "unsupported");
  try {
    return model_.grammars->compile(spec);
  } catch (const Error& e) {
    bad_request(fmt::format("'{}': {}", param, e.what()), param);
  }
}

void OpenAiApi::constrain_to_tool_calls(SamplingParams& params, const OutputParsing& parsing, const json& tools,
                                        const ChatToolOptions& opts) const {
  if (params.grammar)
    bad_request(
        "'tool_choice' \"required\" or a named function cannot be combined with another output "
        "constraint ('response_format', 'structured_outputs')",
        "tool_choice");
  const int max_ws = model_.grammars ? model_.grammars->json_max_whitespace() : 0;
  params.grammar = compile_grammar(
      tool_call_grammar(*parsing.tool_format, tools, opts, parsing.reasoning_open.value_or(false), max_ws),
      "tool_choice");
}

void OpenAiApi::start_job(const std::shared_ptr<ApiJob>& job, std::vector<std::vector<int32_t>> prompts,
                          const SamplingParams& params) {
  // The engine's own validation, with its message, before anything is queued.
  try {
    params.validate(model_.n_vocab);
  } catch (const Error& e) {
    bad_request(e.what());
  }
  {
    std::lock_guard lk(jobs_mu_);
    jobs_.emplace(job->id(), job);
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    try {
      model_.engine->add_request(job->engine_id(p), std::move(prompts[p]), params,
                                 [job, p](RequestOutput&& out) { job->on_output(p, std::move(out)); });
    } catch (const Error& e) {
      job->fail_start(p, ApiError(400, e.what()));
      return;
    }
  }
  job->begin();
  // Registered after the requests exist, so an early disconnect aborts them all.
  std::weak_ptr<ApiJob> weak = job;
  job->responder()->on_disconnect([weak] {
    if (auto j = weak.lock()) j->abort();
  });
}

}  // namespace mla::server
