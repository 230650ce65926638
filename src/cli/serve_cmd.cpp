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
#include "cli/engine_args.h"
#include "cli/model_open.h"
#include "doctor/doctor.h"
#include "engine/deepseek2_runner.h"
#include "engine/engine.h"
#include "engine/scripted_runner.h"
#include "engine/text_decoder.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "jinja/builtin_templates.h"
#include "jinja/chat_template.h"
#include "parallel/dist_runner.h"
#include "parallel/world.h"
#include "server/anthropic_api.h"
#include "server/chat_page.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/reasoning.h"
#include "server/responses_api.h"
#include "server/router.h"
#include "server/server_state.h"
#include "server/tool_choice.h"
#include "server/tool_parsers/tool_parser.h"
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
  std::string self_check = "warn";  // on | warn | off
  // Output parsing.
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "auto";
  std::string scripted_output;  // testing: a ScriptedRunner instead of the model's forward
  bool no_chat_page = false;
  int json_max_whitespace = GrammarCompiler::kDefaultJsonMaxWhitespace;
  EngineArgs engine;
  CommonOptions common;
};

// The doctor's path-agreement checks (mla doctor, src/doctor/) on the model before it serves, on
// the runner's own weights (its packed copies included): the file is loaded and repacked once.
void self_check(const std::string& mode, const Deepseek2Runner& runner, const Tokenizer& tok, int n_threads,
                GgmlType kv_dtype) {
  if (mode == "off") return;
  DoctorOptions o;
  o.n_threads = n_threads;
  o.kv_dtype = kv_dtype;
  // The exact kernels whatever the serving precision: under them the paths give the same bits, so
  // any difference is a wrong path (DoctorOptions::exact_attention's default).
  o.n_greedy = 4;
  // The dispatch trace covers the first calls of serving, not the self-check's: off meanwhile,
  // then set again (counters from zero).
  log().info("self-check: comparing the MLA paths on the canary prompts (--self-check=off skips this)");
  const int trace_limit = trace_dispatch_limit(), tiers_limit = trace_tiers_limit();
  trace_configure("");
  const DoctorReport r = run_path_self_check(runner.bundle(), &tok, o);
  trace_configure(fmt::format("dispatch:{},tiers:{}", trace_limit, tiers_limit));
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

// SIGINT and SIGTERM, taken by sigwait on a detached thread: the first asks for a graceful stop,
// the second for an immediate one. While the model loads there is nothing to drain: exit at once.
// Under mpirun (which sends SIGTERM when a rank died) the workers are looked at first.
class StopSignals {
 public:
  StopSignals(sigset_t set, bool distributed) {
    std::thread([set, distributed] { watch(set, distributed); }).detach();
  }
  // From here on the signal thread touches nothing: without that, a second SIGTERM arriving while
  // serve() returns logs its line as the logger is destroyed (ThreadSanitizer found that race: the
  // detached thread's writes and the exit's static destructors had no order between them).
  ~StopSignals() {
    const std::lock_guard lock(state().mu);
    state().leaving = true;
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  StopSignals(StopSignals&&) = delete;
  StopSignals& operator=(StopSignals&&) = delete;

  int count() const { return state().n_signals.load(); }
  void model_loaded() { state().loaded = true; }

 private:
  // Static: the detached thread may outlive serve() (a signal during exit). It handles a signal
  // under `mu` and stops once `leaving` is set under the same lock.
  struct State {
    std::atomic<int> n_signals{0};
    std::atomic<bool> loaded{false};
    std::mutex mu;
    bool leaving = false;
  };
  static State& state() {
    static State s;
    return s;
  }

  static void watch(sigset_t set, bool distributed) {
    State& st = state();
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      const std::lock_guard lock(st.mu);
      if (st.leaving) return;
      // A process gone from this host is seen at once; a remote one by its silent heartbeat.
      if (distributed) {
        check_workers(5.0);
        if (world_failure()) return;  // serve()'s loop takes the failure path
      }
      // Counted only once the line is logged: the main thread starts shutting down as soon as it
      // sees the count and may exit, destroying the logger under a line still being written
      // (ThreadSanitizer found that race).
      const int n = st.n_signals.load() + 1;
      log().info("received {} ({})", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 n == 1 ? "shutting down" : "aborting running requests");
      if (!st.loaded) {
        log().info("interrupted while loading the model; exiting");
        std::_Exit(0);
      }
      st.n_signals.store(n);
      if (n >= 2) return;
    }
  }
};

void check_serve_args(ServeArgs& a, const EngineSetup& setup) {
  if (a.api_key.empty())
    if (auto k = env_value("MLA_API_KEY")) a.api_key = *k;
  if (a.port < 0 || a.port > 65535) fail("serve: --port must be in [0, 65535], got {}", a.port);
  if (a.timeout_keep_alive <= 0) fail("serve: --timeout-keep-alive must be > 0 seconds, got {}", a.timeout_keep_alive);
  if (a.shutdown_timeout < 0) fail("serve: --shutdown-timeout must be >= 0 seconds, got {}", a.shutdown_timeout);
  if (!std::filesystem::is_regular_file(a.model)) fail("serve: model file '{}' not found", a.model);
  if (world().size() > 1 && !a.scripted_output.empty()) fail("serve: --scripted-output runs in a single process only");
  if (setup.engine.num_speculative_tokens > 0 && !a.scripted_output.empty())
    fail("serve: --speculative-config needs the model's MTP layer; --scripted-output replaces the model");
}

// What the engine serves: the runner (the model's forward, or the scripted outputs), the
// vocabulary and the tokens that end a sequence.
struct ServedRunner {
  std::unique_ptr<ModelRunner> runner;
  std::shared_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> eos_ids;
  std::unique_ptr<GgufFile> vocab_file;  // scripted: the file is read for its vocabulary only
};

ServedRunner load_runner(const ServeArgs& a, EngineSetup& setup, bool distributed) {
  // Several ranks: each one pages in its own shard only, so nothing reads the whole file here.
  if (!distributed)
    prefetch_file(a.model, fmt::format("loading {}", std::filesystem::path(a.model).filename().string()));
  ServedRunner s;
  if (!a.scripted_output.empty()) {
    s.vocab_file = GgufFile::open(a.model);
    s.tokenizer = Tokenizer::from_gguf(*s.vocab_file);
    s.runner = make_scripted_runner(a.scripted_output, *s.tokenizer);
    s.eos_ids = {s.tokenizer->vocab().eos};
    log().warn("--scripted-output: the model's forward pass is replaced by the outputs in '{}'", a.scripted_output);
    return s;
  }
  OpenedModel m = open_model(a.model, setup, a.engine, "serve");
  log().info("loaded {}", m.summary);
  s.tokenizer = Tokenizer::from_gguf(*m.file);
  // The self-check runs the whole model in this process: not under mpirun, where no rank holds it all.
  if (m.deepseek4) {
    if (a.self_check != "off")
      log().info("--self-check: skipped for deepseek4 (it compares the MLA paths, which deepseek4 does not have)");
  } else if (!distributed) {
    self_check(a.self_check, *m.deepseek2, *s.tokenizer, setup.model.n_threads, setup.kv.dtype);
  } else if (a.self_check != "off") {
    log().info("--self-check: skipped under mpirun (it runs the whole model in one process; use mla doctor)");
  }
  s.eos_ids = m.eos_ids;
  s.runner = std::move(m.runner);
  return s;
}

// The chat template's source (--chat-template, else the model's), "" when there is none.
std::string chat_template_source(const ServeArgs& a, const Tokenizer& tok, bool deepseek4) {
  std::string src =
      a.chat_template.empty() ? tok.vocab().chat_template : read_text_file(a.chat_template, "--chat-template");
  if (src.empty() && deepseek4) {
    log().info(
        "the model has no chat template (tokenizer.chat_template): using mla's DeepSeek-V4 template "
        "(models/templates/deepseek-v4.jinja; --chat-template FILE overrides it)");
    return std::string(jinja::builtin::kDeepseekV4Template);
  }
  if (src.empty())
    log().warn(
        "the model has no chat template (tokenizer.chat_template): /v1/chat/completions will answer 400; "
        "give one with --chat-template");
  return src;
}

// Until a signal or a failed worker rank: then stop accepting, let running requests finish for
// --shutdown-timeout seconds (none after a rank failed or a second signal), abort the rest.
void serve_until_stopped(const ServeArgs& a, const StopSignals& signals, server::ServerState& api,
                         server::HttpServer& http, Engine& engine) {
  while (signals.count() == 0 && !world_failure()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Until the answers of finished requests have reached their clients (or `limit` passed).
  auto flush_responses = [&](std::chrono::milliseconds limit) {
    const auto flush_end = std::chrono::steady_clock::now() + limit;
    while ((api.n_active() > 0 || http.n_busy_connections() > 0) && std::chrono::steady_clock::now() < flush_end)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  api.begin_shutdown();
  http.drain();
  if (auto failure = world_failure()) {
    // The requests in flight failed with 503 (their forward threw); new ones get 503 too. Let
    // the answers reach their clients, then leave with an error (mpirun ends the other ranks).
    log().error("serve: stopping: {}", *failure);
    flush_responses(std::chrono::seconds(2));
    http.stop();
    engine.stop();
    exit_code() = 1;
    return;
  }
  const auto grace_end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout * 1000));
  if (api.n_active() > 0)
    log().info("waiting up to {} s for {} running request(s)", a.shutdown_timeout, api.n_active());
  while (api.n_active() > 0 && signals.count() < 2 && std::chrono::steady_clock::now() < grace_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (api.n_active() > 0) {
    log().info("aborting {} request(s) still running", api.n_active());
    api.abort_all();
  }
  // Let the aborted requests' last chunks reach their clients.
  flush_responses(std::chrono::seconds(5));
  http.stop();
  engine.stop();
  log().info("stopped");
}

void serve(ServeArgs& a) {
  const sigset_t stop_signals = block_stop_signals();
  apply_common_options(a.common);
  EngineSetup setup = build_engine_setup(a.engine, a.common, "serve");
  check_serve_args(a, setup);
  // Under mpirun, before the workers part ways: deepseek4's refusal of mpirun reaches every rank.
  // (A single process opens the file only after it listens: /health answers 503 while it loads.)
  if (world().size() > 1 && a.scripted_output.empty() && is_deepseek4_file(a.model))
    adapt_setup_for_deepseek4(setup, a.engine, "serve");
  const std::string name =
      a.served_model_name.empty() ? std::filesystem::path(a.model).filename().string() : a.served_model_name;
  // Under mpirun: rank 0 serves HTTP; a worker computes its share of rank 0's steps until rank 0
  // stops (mpirun forwards SIGINT/SIGTERM, which stay blocked here: rank 0 ends the workers).
  const bool distributed = world().size() > 1;
  if (is_worker()) {
    open_runner(a.model, setup.policy, setup.model, setup.kv);
    return;
  }

  server::ServerState api({name, a.model});
  server::Router router(a.api_key);
  server::register_server_routes(router, api);
  server::register_openai_routes(router, api);
  server::register_anthropic_routes(router, api);
  server::register_responses_routes(router, api);
  if (!a.no_chat_page) server::register_chat_page(router);
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
  StopSignals signals(stop_signals, distributed);

  const auto t0 = std::chrono::steady_clock::now();
  ServedRunner loaded = load_runner(a, setup, distributed);
  log_engine_setup(setup);
  const std::shared_ptr<Tokenizer>& tokenizer = loaded.tokenizer;
  const std::vector<int32_t>& eos_ids = loaded.eos_ids;
  const std::string tmpl_src = chat_template_source(a, *tokenizer, setup.deepseek4);
  std::shared_ptr<ChatTemplate> tmpl;
  if (!tmpl_src.empty()) tmpl = std::make_shared<ChatTemplate>(tmpl_src);
  setup.engine.eos_token_ids = eos_ids;
  const int n_threads = setup.model.n_threads;
  auto engine =
      std::make_unique<Engine>(std::move(loaded.runner), setup.engine, std::make_shared<TokenizerDecoder>(tokenizer));
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
  if (tmpl) sm.render_chat = server::make_chat_renderer(tmpl, *tokenizer);
  sm.chat_template = tmpl_src;
  sm.grammars = &grammars;
  sm.max_model_len = engine->config().max_model_len;
  sm.n_vocab = engine->n_vocab();
  api.set_model(std::move(sm));
  signals.model_loaded();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("model '{}' loaded in {:.2f} s: max_model_len {}, {} threads, mla path {}", name, secs,
             engine->config().max_model_len, n_threads, a.engine.mla_path);
  log().info("ready: {}/v1 (served model name '{}'{})", url, name, a.api_key.empty() ? "" : ", API key required");
  serve_until_stopped(a, signals, api, http, *engine);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API");
  static ServeArgs a;
  cmd->add_option("-m,--model", a.model, "GGUF file (deepseek2, deepseek32, glm-dsa or deepseek4)")->required();
  cmd->add_option("--host", a.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a.port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", a.served_model_name, "Model name in the API (default: the model's file name)");
  cmd->add_option("--api-key", a.api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health and /metrics "
                  "(default: $MLA_API_KEY)");
  cmd->add_flag("--no-chat-page", a.no_chat_page,
                "Do not serve the chat page at / (then / answers 404, or 401 without the API key)");
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
  cmd->add_option("--json-max-whitespace", a.json_max_whitespace,
                  "Structured outputs: most whitespace characters between two JSON tokens (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
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
  cmd->add_option("--scripted-output", a.scripted_output,
                  "Testing: replace the model's forward pass by the outputs in this JSON file "
                  "([{\"trigger\": TEXT, \"output\": TEXT}]); the GGUF gives only the vocabulary")
      ->group("Testing");
  add_engine_args(cmd, a.engine);
  add_common_options(cmd, a.common);
  cmd->callback([] { serve(a); });
}

}  // namespace mla::cli
