#pragma once
// The OpenAI-compatible API on top of the engine's request API: routing, auth, errors, and the
// endpoints /v1/completions, /v1/chat/completions, /v1/models, /tokenize, /detokenize, /version,
// /health, /metrics. Plug handle() into an HttpServer.
//
// Life cycle: the API answers from the start (/health 503, generation 503 "loading") until
// set_model(); begin_shutdown() makes new requests 503 while running ones finish; abort_all()
// ends those that are left (finish_reason "abort").
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/chat_tools.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace mla {
class Engine;
class GrammarCompiler;
class Tokenizer;
}  // namespace mla

namespace mla::server {

// What a chat template needs; the renderer returns the prompt text or throws mla::Error (a bad
// message list or a template error), which becomes a 400.
struct ChatPromptInput {
  const json& messages;
  const json& tools;   // null or array
  const json& kwargs;  // chat_template_kwargs: extra template variables
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};
using ChatRenderer = std::function<std::string(const ChatPromptInput&)>;

// The model being served. The pointers must stay valid until the API is destroyed.
struct ServedModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ChatRenderer render_chat;             // empty: the model has no chat template (chat requests → 400)
  GrammarCompiler* grammars = nullptr;  // null: structured outputs answer 400
  int max_model_len = 0;
  int n_vocab = 0;
  ServerParsers parsers;  // tool-call and reasoning parsers (chat_tools.h)
};

struct ApiConfig {
  std::string served_model_name;
  std::string model_path;  // shown as the model's "root"
  std::string api_key;     // "" → no auth
};

class ApiJob;

class OpenAiApi {
 public:
  explicit OpenAiApi(ApiConfig config);
  ~OpenAiApi();

  // The HttpHandler.
  void handle(HttpRequest&& req, const std::shared_ptr<HttpResponder>& res);

  void set_model(ServedModel model);  // ready: /health 200
  bool ready() const { return ready_.load(); }
  void begin_shutdown();
  int n_active() const;  // generation requests not finished
  void abort_all();

  ServerMetrics& metrics() { return metrics_; }

  // Used by GenerationJob.
  const ServedModel& model() const { return model_; }
  const ApiConfig& config() const { return config_; }
  TokenText token_text(int32_t id) const;
  // Compiles an output constraint for SamplingParams::grammar (cached by spec). A spec that does
  // not compile is a 400 naming `param` and the problem.
  std::shared_ptr<const CompiledGrammar> compile_grammar(const GrammarSpec& spec, const std::string& param) const;
  void job_finished(const std::string& id);
  // tool_choice "required" / a named function: params.grammar constrains the output to calls in
  // the syntax of parsing.tool_format (tool_choice.h). 400 when the request is constrained
  // otherwise already (response_format, structured_outputs).
  void constrain_to_tool_calls(SamplingParams& params, const OutputParsing& parsing, const json& tools,
                               const ChatToolOptions& opts) const;

 private:
  void route(HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void require_ready() const;
  void check_model_name(const std::string& name) const;
  void handle_completions(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void handle_chat(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void handle_tokenize(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void handle_detokenize(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  json model_card() const;
  std::string render_chat(const json& messages, const json& tools, const json& kwargs, bool add_generation_prompt,
                          bool continue_final_message) const;
  std::vector<int32_t> tokenize(const std::string& text, bool add_special) const;
  // A rendered chat prompt: its own special tokens, plus BOS where the vocabulary wants one and
  // the template did not write it.
  std::vector<int32_t> tokenize_chat(const std::string& rendered) const;
  void start_job(const std::shared_ptr<ApiJob>& job, std::vector<std::vector<int32_t>> prompts,
                 const SamplingParams& params);
  // The Anthropic Messages API (anthropic_api.cpp).
  void handle_messages(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void handle_count_tokens(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);

  ApiConfig config_;
  ServedModel model_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  ServerMetrics metrics_;
  const int64_t created_;  // unix seconds at start-up
  std::atomic<uint64_t> next_id_{1};

  mutable std::mutex jobs_mu_;
  std::unordered_map<std::string, std::weak_ptr<ApiJob>> jobs_;
};

}  // namespace mla::server
