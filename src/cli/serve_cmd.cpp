// mla serve -m FILE: the OpenAI-compatible HTTP server (src/server/) over the engine.
//
// Start-up order: listen first (so /health answers 503 while loading), read the model file with
// a progress bar, build the runner, tokenizer, chat template and engine, then /health is 200.
// SIGINT/SIGTERM: stop accepting, let running requests finish for --shutdown-timeout seconds,
// abort the rest (finish_reason "abort"), exit 0. A second signal aborts at once.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX sigwait and pthread_sigmask

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "doctor/doctor.h"
#include "engine/deepseek2_runner.h"
#include "engine/engine.h"
#include "engine/scripted_runner.h"
#include "engine/text_decoder.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "parallel/dist_runner.h"
#include "parallel/world.h"
#include "server/anthropic_api.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/reasoning.h"
#include "server/router.h"
#include "server/server_state.h"
#include "server/tool_choice.h"
#include "server/tool_parsers/tool_parser.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/env.h"
#include "util/error.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/trace.h"

namespace mla::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string served_model_name;
  std::string api_key;
  std::string chat_template;
  int http_threads = 2;
  std::string max_request_bytes = "16M";
  double timeout_keep_alive = 5;
  double shutdown_timeout = 10;
  // Engine.
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;
  bool no_prefix_caching = false;
  std::string mla_path = "auto";
  int threads = 0;
  std::string kv_cache_dtype = "f16";
  int64_t kv_cache_tokens = 0;
  std::string kv_cache_memory;
  std::string self_check = "warn";  // on | warn | off
  // Output parsing.
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "auto";
  std::string scripted_output;     // testing: a ScriptedRunner instead of the model's forward
  std::string speculative_config;  // {"method": "mtp", "num_speculative_tokens": K}
  int json_max_whitespace = GrammarCompiler::kDefaultJsonMaxWhitespace;
  CommonOptions common;
};

// The chat renderer: the template sees messages, tools (when given), add_generation_prompt,
// bos_token, eos_token and chat_template_kwargs (as transformers' apply_chat_template passes
// them).
server::ChatRenderer make_renderer(const std::shared_ptr<ChatTemplate>& tmpl, const Tokenizer& tok) {
  auto special_text = [&tok](TokenId id) {
    return tok.is_valid(id) ? std::string(tok.token_bytes(id, true)) : std::string();
  };
  std::string bos = special_text(tok.vocab().bos), eos = special_text(tok.vocab().eos);
  return [tmpl, bos, eos](const server::ChatPromptInput& in) {
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    for (const auto& [k, v] : in.kwargs.items()) ctx[k] = v;
    ctx["messages"] = in.messages;
    if (!in.tools.is_null()) ctx["tools"] = in.tools;
    ctx["add_generation_prompt"] = in.add_generation_prompt;
    ctx["bos_token"] = bos;
    ctx["eos_token"] = eos;
    std::string text = tmpl->render(ctx);
    if (in.continue_final_message) {
      // End the prompt right after the final (assistant) message's text, so the model
      // continues it instead of starting a new turn.
      const std::string last = server::string_or_empty(in.messages.back(), "content");
      const size_t at = last.empty() ? std::string::npos : text.rfind(last);
      if (at == std::string::npos)
        fail("continue_final_message: the final message's text is not in the rendered prompt");
      text.resize(at + last.size());
    }
    return text;
  };
}

// The doctor's path-agreement checks (mla doctor, src/doctor/) on the model before it serves, on
// the runner's own weights (its packed copies included): the file is loaded and repacked once.
void self_check(const std::string& mode, const Deepseek2Runner& runner, const Tokenizer& tok, int n_threads,
                GgmlType kv_dtype) {
  if (mode == "off") return;
  DoctorOptions o;
  o.n_threads = n_threads;
  o.kv_dtype = kv_dtype;
  o.n_greedy = 4;
  // The dispatch trace covers the first calls of serving, not the self-check's: off meanwhile,
  // then set again (counters from zero).
  log().info("self-check: comparing the MLA paths on the canary prompts (--self-check=off skips this)");
  const int trace_limit = trace_dispatch_limit();
  trace_configure("");
  const DoctorReport r = run_path_self_check(runner.bundle(), &tok, o);
  trace_configure(trace_limit > 0 ? fmt::format("dispatch:{}", trace_limit) : "");
  apply_self_check(mode, r);
}

// The tool-call and reasoning parsers: named by the flags, or chosen from the chat template
// ("auto"), or none.
server::ServerParsers choose_parsers(const ServeArgs& a, const std::string& tmpl_src) {
  server::ServerParsers p;
  std::string tool = a.tool_call_parser == "auto" ? server::detect_tool_call_format(tmpl_src) : a.tool_call_parser;
  if (tool == "none") tool.clear();
  if (!tool.empty()) {
    p.tool_format = server::make_tool_call_format(tool);
    if (!p.tool_format)
      fail("serve: --tool-call-parser '{}' is not one of {}, auto, none", tool,
           fmt::join(server::tool_call_format_names(), ", "));
  }
  std::string reasoning = a.reasoning_parser == "auto" ? server::detect_reasoning_parser(tmpl_src) : a.reasoning_parser;
  if (reasoning == "none") reasoning.clear();
  if (!reasoning.empty() && !server::is_reasoning_parser(reasoning))
    fail("serve: --reasoning-parser '{}' is not one of {}, auto, none", reasoning,
         fmt::join(server::reasoning_parser_names(), ", "));
  p.reasoning_parser = reasoning;
  log().info("tool-call parser: {}; reasoning parser: {}", tool.empty() ? "none" : tool,
             reasoning.empty() ? "none" : reasoning);
  return p;
}

std::unique_ptr<ModelRunner> make_scripted_runner(const std::string& path, const Tokenizer& tok) {
  auto encode = [&tok](const std::string& text) {
    EncodeOptions opt;
    opt.add_special = false;
    opt.parse_special = true;
    return tok.encode(text, opt);
  };
  auto decode = [&tok](std::span<const int32_t> ids) { return tok.decode_text(ids); };
  return std::make_unique<ScriptedRunner>(load_script(path, encode), static_cast<int>(tok.n_tokens()), tok.vocab().eos,
                                          decode);
}

// Blocks SIGINT and SIGTERM in this thread and every thread started after it; signals are then
// taken by sigwait on a dedicated thread.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

void serve(ServeArgs& a) {
  const sigset_t stop_signals = block_stop_signals();
  apply_common_options(a.common);
  if (a.api_key.empty())
    if (auto k = env_value("MLA_API_KEY")) a.api_key = *k;
  if (a.port < 0 || a.port > 65535) fail("serve: --port must be in [0, 65535], got {}", a.port);
  if (a.timeout_keep_alive <= 0) fail("serve: --timeout-keep-alive must be > 0 seconds, got {}", a.timeout_keep_alive);
  if (a.shutdown_timeout < 0) fail("serve: --shutdown-timeout must be >= 0 seconds, got {}", a.shutdown_timeout);
  if (!std::filesystem::is_regular_file(a.model)) fail("serve: model file '{}' not found", a.model);
  const std::string name =
      a.served_model_name.empty() ? std::filesystem::path(a.model).filename().string() : a.served_model_name;
  const MlaPathPolicy policy = parse_mla_path_policy(a.mla_path);
  ModelOptions mo;
  mo.n_threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  mo.max_batch_tokens = a.max_num_batched_tokens;
  mo.dsa = dsa_enabled(a.common);
  const int n_spec =
      apply_speculative_config(a.speculative_config, false, a.max_num_seqs, "serve: --speculative-config", mo);
  KvCacheOptions kv;
  auto kv_type = ggml_type_from_name(a.kv_cache_dtype);
  if (!kv_type) fail("serve: --kv-cache-dtype '{}' is not a type name (f16, bf16, f32, q8_0)", a.kv_cache_dtype);
  kv.dtype = *kv_type;
  kv.tokens = a.kv_cache_tokens;
  if (!a.kv_cache_memory.empty()) kv.memory_bytes = parse_byte_size(a.kv_cache_memory, "--kv-cache-memory");
  // Under mpirun: rank 0 serves HTTP; a worker computes its share of rank 0's steps until rank 0
  // stops (mpirun forwards SIGINT/SIGTERM, which stay blocked here: rank 0 ends the workers).
  const bool distributed = world().size() > 1;
  if (distributed && !a.scripted_output.empty()) fail("serve: --scripted-output runs in a single process only");
  if (n_spec > 0 && !a.scripted_output.empty())
    fail("serve: --speculative-config needs the model's MTP layer; --scripted-output replaces the model");
  if (is_worker()) {
    open_runner(a.model, policy, mo, kv);
    return;
  }

  server::ServerState api({name, a.model});
  server::Router router(a.api_key);
  server::register_server_routes(router, api);
  server::register_openai_routes(router, api);
  server::register_anthropic_routes(router, api);
  server::HttpServerConfig hc;
  hc.host = a.host;
  hc.port = static_cast<uint16_t>(a.port);
  hc.n_threads = a.http_threads;
  hc.limits.max_body_bytes = static_cast<size_t>(parse_byte_size(a.max_request_bytes, "--max-request-bytes"));
  hc.limits.keep_alive = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_keep_alive * 1000));
  server::HttpServer http(hc, [&router](server::HttpRequest&& r, const std::shared_ptr<server::HttpResponder>& res) {
    router.handle(std::move(r), res);
  });
  http.start();
  const std::string url = fmt::format("http://{}:{}", a.host, http.port());
  log().info("listening on {} (/health is 503 until the model is loaded)", url);

  // Signals: the first asks for a graceful stop, the second for an immediate one. While the
  // model loads there is nothing to drain: exit at once.
  // Static: the detached thread may outlive this function (a signal during exit).
  static std::atomic<int> n_signals{0};
  static std::atomic<bool> loaded{false};
  // The signal thread handles a signal under `signal_mu`; once serve() is leaving (`leaving` set
  // under the same lock) it touches nothing more. Without that, a second SIGTERM arriving while the
  // main thread returns logs its line as the logger is destroyed (ThreadSanitizer found that race:
  // the detached thread's writes and the exit's static destructors had no order between them).
  static std::mutex signal_mu;
  static bool leaving = false;
  struct LeaveGuard {
    LeaveGuard(const LeaveGuard&) = delete;
    LeaveGuard& operator=(const LeaveGuard&) = delete;
    LeaveGuard(LeaveGuard&&) = delete;
    LeaveGuard& operator=(LeaveGuard&&) = delete;
    LeaveGuard() = default;
    ~LeaveGuard() {
      const std::lock_guard lock(signal_mu);
      leaving = true;
    }
  };
  const LeaveGuard leave_guard;
  std::thread signal_thread([stop_signals, distributed] {
    for (;;) {
      int sig = 0;
      if (sigwait(&stop_signals, &sig) != 0) continue;
      const std::lock_guard lock(signal_mu);
      if (leaving) return;
      // mpirun sends SIGTERM when a rank died: look at the workers before a graceful stop (a
      // process gone from this host is seen at once; a remote one by its silent heartbeat).
      if (distributed) {
        check_workers(5.0);
        if (world_failure()) return;  // the main loop below takes the failure path
      }
      // Counted only once the line is logged: the main thread starts shutting down as soon as it
      // sees the count and may exit, destroying the logger under a line still being written
      // (ThreadSanitizer found that race).
      const int n = n_signals.load() + 1;
      log().info("received {} ({})", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 n == 1 ? "shutting down" : "aborting running requests");
      if (!loaded) {
        log().info("interrupted while loading the model; exiting");
        std::_Exit(0);
      }
      n_signals.store(n);
      if (n >= 2) return;
    }
  });
  signal_thread.detach();

  // Load.
  const auto t0 = std::chrono::steady_clock::now();
  // Several ranks: each one pages in its own shard only, so nothing reads the whole file here.
  if (!distributed)
    prefetch_file(a.model, fmt::format("loading {}", std::filesystem::path(a.model).filename().string()));
  std::unique_ptr<ModelRunner> runner;
  std::shared_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> eos_ids;
  std::unique_ptr<GgufFile> vocab_file;  // scripted: the file is read for its vocabulary only
  if (a.scripted_output.empty()) {
    auto rn = open_runner(a.model, policy, mo, kv);
    tokenizer = Tokenizer::from_gguf(rn->file());
    // The self-check runs the whole model in this process: not under mpirun, where no rank holds it all.
    if (!distributed)
      self_check(a.self_check, *rn, *tokenizer, mo.n_threads, kv.dtype);
    else if (a.self_check != "off")
      log().info("--self-check: skipped under mpirun (it runs the whole model in one process; use mla doctor)");
    eos_ids = rn->eos_token_ids();
    runner = std::move(rn);
  } else {
    vocab_file = GgufFile::open(a.model);
    tokenizer = Tokenizer::from_gguf(*vocab_file);
    runner = make_scripted_runner(a.scripted_output, *tokenizer);
    eos_ids = {tokenizer->vocab().eos};
    log().warn("--scripted-output: the model's forward pass is replaced by the outputs in '{}'", a.scripted_output);
  }
  std::string tmpl_src =
      a.chat_template.empty() ? tokenizer->vocab().chat_template : read_text_file(a.chat_template, "--chat-template");
  std::shared_ptr<ChatTemplate> tmpl;
  if (!tmpl_src.empty())
    tmpl = std::make_shared<ChatTemplate>(tmpl_src);
  else
    log().warn(
        "the model has no chat template (tokenizer.chat_template): /v1/chat/completions will answer 400; "
        "give one with --chat-template");

  EngineConfig ec;
  ec.max_num_seqs = a.max_num_seqs;
  ec.max_num_batched_tokens = a.max_num_batched_tokens;
  ec.max_model_len = a.max_model_len;
  ec.enable_prefix_caching = !a.no_prefix_caching;
  ec.path_policy = policy;
  ec.eos_token_ids = eos_ids;
  ec.num_speculative_tokens = n_spec;
  const int n_threads = mo.n_threads;
  auto engine = std::make_unique<Engine>(std::move(runner), ec, std::make_shared<TokenizerDecoder>(tokenizer));
  engine->start();
  server::ServedModel sm;
  sm.parsers = choose_parsers(a, tmpl_src);
  // The markers of constrained tool calls stay writable where the vocabulary has them as CONTROL
  // tokens.
  const auto markers = server::constrained_call_markers(server::constrained_call_format(sm.parsers));
  GrammarCompiler grammars(grammar_vocab(*tokenizer, markers), engine->n_vocab(), eos_ids, std::min(n_threads, 4), 64,
                           a.json_max_whitespace);
  sm.engine = engine.get();
  sm.tokenizer = tokenizer.get();
  if (tmpl) sm.render_chat = make_renderer(tmpl, *tokenizer);
  sm.grammars = &grammars;
  sm.max_model_len = engine->config().max_model_len;
  sm.n_vocab = engine->n_vocab();
  api.set_model(std::move(sm));
  loaded = true;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("model '{}' loaded in {:.2f} s: max_model_len {}, {} threads, mla path {}", name, secs,
             engine->config().max_model_len, n_threads, a.mla_path);
  log().info("ready: {}/v1 (served model name '{}'{})", url, name, a.api_key.empty() ? "" : ", API key required");

  // Serve until a signal, or until a worker rank is gone.
  while (n_signals.load() == 0 && !world_failure()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Until the answers of finished requests have reached their clients (or `limit` passed).
  auto flush_responses = [&](std::chrono::milliseconds limit) {
    const auto flush_end = std::chrono::steady_clock::now() + limit;
    while ((api.n_active() > 0 || http.n_busy_connections() > 0) && std::chrono::steady_clock::now() < flush_end)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  if (auto failure = world_failure()) {
    // The requests in flight failed with 503 (their forward threw); new ones get 503 too. Let
    // the answers reach their clients, then leave with an error (mpirun ends the other ranks).
    log().error("serve: stopping: {}", *failure);
    api.begin_shutdown();
    http.drain();
    flush_responses(std::chrono::seconds(2));
    http.stop();
    engine->stop();
    exit_code() = 1;
    return;
  }

  api.begin_shutdown();
  http.drain();
  const auto grace_end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout * 1000));
  if (api.n_active() > 0)
    log().info("waiting up to {} s for {} running request(s)", a.shutdown_timeout, api.n_active());
  while (api.n_active() > 0 && n_signals.load() < 2 && std::chrono::steady_clock::now() < grace_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (api.n_active() > 0) {
    log().info("aborting {} request(s) still running", api.n_active());
    api.abort_all();
  }
  // Let the aborted requests' last chunks reach their clients.
  flush_responses(std::chrono::seconds(5));
  http.stop();
  engine->stop();
  log().info("stopped");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API");
  static ServeArgs a;
  cmd->add_option("-m,--model", a.model, "deepseek2 GGUF file")->required();
  cmd->add_option("--host", a.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a.port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", a.served_model_name, "Model name in the API (default: the model's file name)");
  cmd->add_option("--api-key", a.api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health and /metrics "
                  "(default: $MLA_API_KEY)");
  cmd->add_option("--chat-template", a.chat_template,
                  "Jinja chat template file (default: the model's tokenizer.chat_template)");
  cmd->add_option("--http-threads", a.http_threads, "HTTP I/O threads")->capture_default_str();
  cmd->add_option("--max-request-bytes", a.max_request_bytes, "Largest request body (e.g. 16M); larger ones get 413")
      ->capture_default_str();
  cmd->add_option("--timeout-keep-alive", a.timeout_keep_alive,
                  "Seconds an idle connection (or a slow request read) may take before it is closed")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", a.shutdown_timeout,
                  "Seconds running requests may take to finish after SIGINT/SIGTERM before they are aborted")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", a.max_num_seqs, "Most sequences running at once")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens, "Token budget per engine step")
      ->capture_default_str();
  cmd->add_option("--max-model-len", a.max_model_len, "Context length (default: the model's, capped by the KV cache)");
  cmd->add_flag("--no-enable-prefix-caching", a.no_prefix_caching, "Disable the prefix cache");
  cmd->add_option("--mla-path", a.mla_path,
                  "MLA attention path: auto (decode MQA; prefill chunks down the path cheaper at the model's widths, "
                  "logged at start) | mha | mqa")
      ->check(CLI::IsMember({"auto", "mha", "mqa"}))
      ->capture_default_str();
  cmd->add_option("-t,--threads", a.threads, "Compute threads (default: all hardware threads)");
  cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype, "KV cache type: f16 | bf16 | f32 | q8_0")
      ->capture_default_str();
  cmd->add_option("--kv-cache-tokens", a.kv_cache_tokens, "KV cache capacity in tokens");
  cmd->add_option("--json-max-whitespace", a.json_max_whitespace,
                  "Structured outputs: most whitespace characters between two JSON tokens (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-memory", a.kv_cache_memory, "KV cache capacity in bytes (e.g. 2G)");
  cmd->add_flag("--self-check{on}", a.self_check,
                "Before /health turns 200, run the MLA paths on canary prompts and compare them (mla doctor's "
                "path agreement): --self-check refuses to start when they disagree, --self-check=warn (the "
                "default) logs and serves anyway, --self-check=off skips it")
      ->check(CLI::IsMember({"on", "warn", "off"}));
  cmd->add_option("--tool-call-parser", a.tool_call_parser,
                  "Tool-call format parsed from chat outputs: auto (from the chat template) | none | "
                  "glm45 | glm47 | deepseek_v3 | deepseek_v31 | deepseek_v32 | kimi_k2 | hermes")
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", a.reasoning_parser,
                  "Reasoning split (<think>) of chat outputs: auto (from the chat template) | none | "
                  "deepseek_r1 | deepseek_v3 | glm45 | glm47 | kimi_k2 | qwen3")
      ->capture_default_str();
  cmd->add_option("--speculative-config", a.speculative_config,
                  R"(Speculative decoding with the model's MTP layer, as vLLM spells it: )"
                  R"('{"method": "mtp", "num_speculative_tokens": K}', K = 1..4)");
  cmd->add_option("--scripted-output", a.scripted_output,
                  "Testing: replace the model's forward pass by the outputs in this JSON file "
                  "([{\"trigger\": TEXT, \"output\": TEXT}]); the GGUF gives only the vocabulary")
      ->group("Testing");
  add_common_options(cmd, a.common);
  cmd->callback([] { serve(a); });
}

}  // namespace mla::cli
