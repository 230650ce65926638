// The HTTP server + the API (router, server routes, OpenAI and Anthropic routes) + engine, live
// on a loopback port, with the engine's fake model (tests/engine/fake_runner.h) and the real
// DeepSeek-LLM vocabulary. What this proves without a
// model file: routing and statuses, keep-alive, streaming framing, stream == non-stream text,
// disconnect → abort with the KV blocks freed, and the size limits. (tests/py/test_server_*.py
// run the same server binary with a real synthetic model and the official openai client.)
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <thread>

#include "../engine/fake_runner.h"
#include "../tokenizer/test_data.h"
#include "engine/engine.h"
#include "engine/text_decoder.h"
#include "jinja/chat_template.h"
#include "server/anthropic_api.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/router.h"
#include "server/server_state.h"
#include "tokenizer/tokenizer.h"

namespace mla::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
  json j() const { return json::parse(body); }
};

// One HTTP/1.1 connection (keep-alive) to the server.
class Client {
 public:
  explicit Client(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  Reply request(http::verb method, const std::string& target, const std::string& body = "",
                const std::string& auth = "") {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!auth.empty()) req.set(http::field::authorization, auth);
    if (!body.empty() || method == http::verb::post) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    http::write(socket_, req);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(socket_, buffer_, parser);
    auto res = parser.release();
    return {static_cast<int>(res.result_int()), res.body(), std::string(res[http::field::content_type])};
  }
  Reply post(const std::string& target, const json& body, const std::string& auth = "") {
    return request(http::verb::post, target, body.dump(), auth);
  }
  tcp::socket& socket() { return socket_; }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

// The text of an SSE completions stream, checking the framing on the way.
std::string stream_text(const std::string& body, json* usage = nullptr) {
  std::string text;
  size_t at = 0;
  bool done = false;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "event not terminated by a blank line";
    if (end == std::string::npos) break;
    std::string ev = body.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    EXPECT_FALSE(done) << "event after [DONE]";
    if (ev == "data: [DONE]") {
      done = true;
      continue;
    }
    json j = json::parse(ev.substr(6));
    if (j.contains("usage") && usage) *usage = j["usage"];
    for (const auto& c : j["choices"]) text += c["text"].get<std::string>();
  }
  EXPECT_TRUE(done) << "no [DONE]";
  return text;
}

class LiveServer {
 public:
  explicit LiveServer(HttpLimits limits = {}, std::string api_key = "")
      : tok_(Tokenizer::open(test::fixture_file("vocab/ggml-vocab-deepseek-llm.gguf"))),
        chat_(R"({{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %})"),
        api_(ApiConfig{"fake", "fake.gguf"}),
        router_(std::move(api_key)),
        http_(HttpServerConfig{"127.0.0.1", 0, 2, limits},
              [this](HttpRequest&& r, std::shared_ptr<HttpResponder> res) { router_.handle(std::move(r), res); }) {
    register_server_routes(router_, api_);
    register_openai_routes(router_, api_);
    register_anthropic_routes(router_, api_);
    http_.start();
    const int n_vocab = static_cast<int>(tok_->n_tokens());
    EngineConfig ec;
    ec.max_model_len = 512;
    ec.eos_token_ids = {tok_->vocab().eos};
    engine_ =
        std::make_unique<Engine>(std::make_unique<testing::FakeRunner>(n_vocab, /*block_size=*/16, /*n_blocks=*/256),
                                 ec, std::make_shared<TokenizerDecoder>(tok_));
    engine_->start();
  }
  void make_ready() {
    ServedModel m;
    m.engine = engine_.get();
    m.tokenizer = tok_.get();
    m.max_model_len = engine_->config().max_model_len;
    m.n_vocab = engine_->n_vocab();
    m.render_chat = [this](const ChatPromptInput& in) {
      nlohmann::ordered_json ctx;
      ctx["messages"] = in.messages;
      ctx["add_generation_prompt"] = in.add_generation_prompt;
      ctx["bos_token"] = "<｜begin▁of▁sentence｜>";
      return chat_.render(ctx);
    };
    api_.set_model(std::move(m));
  }
  ~LiveServer() {
    api_.abort_all();
    http_.stop();
    engine_->stop();
  }
  uint16_t port() const { return http_.port(); }
  Engine& engine() { return *engine_; }
  HttpServer& http() { return http_; }

 private:
  std::shared_ptr<Tokenizer> tok_;
  ChatTemplate chat_;
  ServerState api_;
  Router router_;
  HttpServer http_;
  std::unique_ptr<Engine> engine_;
};

const json kProbe = {{"model", "fake"}, {"prompt", "Hello"}, {"max_tokens", 1}, {"temperature", 0}};

TEST(ServerHttp, LoadingThenReady) {
  LiveServer s;
  Client c(s.port());
  EXPECT_EQ(c.request(http::verb::get, "/health").status, 503);
  Reply r = c.post("/v1/completions", kProbe);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.j()["error"]["code"], "loading");
  EXPECT_EQ(c.request(http::verb::get, "/version").status, 200);
  s.make_ready();
  EXPECT_EQ(c.request(http::verb::get, "/health").status, 200);
  r = c.post("/v1/completions", kProbe);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.j();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 1);
  // "Hello" is BOS + one token in this vocabulary.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
}

TEST(ServerHttp, RoutingErrorsAndKeepAlive) {
  LiveServer s;
  s.make_ready();
  Client c(s.port());  // every request below on one connection
  Reply r = c.request(http::verb::get, "/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.j()["error"]["type"], "not_found_error");
  EXPECT_EQ(c.request(http::verb::get, "/v1/completions").status, 405);
  EXPECT_EQ(c.request(http::verb::post, "/v1/completions", "{not json").status, 400);
  r = c.post("/v1/completions", {{"model", "other"}, {"prompt", "x"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.j()["error"]["code"], "model_not_found");
  r = c.post("/v1/completions", {{"prompt", "x"}, {"temperature", -1}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.j()["error"]["param"], "temperature");
  r = c.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 600}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.j()["error"]["message"].get<std::string>().find("512"), std::string::npos);
  r = c.post("/tokenize", {{"prompt", "Hello world"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["count"], r.j()["tokens"].size());
  EXPECT_EQ(r.j()["max_model_len"], 512);
  r = c.post("/detokenize", {{"tokens", r.j()["tokens"]}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["prompt"], "<｜begin▁of▁sentence｜>Hello world");
  r = c.request(http::verb::get, "/v1/models");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["data"][0]["id"], "fake");
  EXPECT_EQ(c.post("/v1/completions", kProbe).status, 200);  // still serving
}

TEST(ServerHttp, ApiKey) {
  LiveServer s({}, "sk-test");
  s.make_ready();
  Client c(s.port());
  EXPECT_EQ(c.post("/v1/completions", kProbe).status, 401);
  EXPECT_EQ(c.post("/v1/completions", kProbe, "Bearer sk-wrong").status, 401);
  EXPECT_EQ(c.request(http::verb::get, "/v1/models").status, 401);
  EXPECT_EQ(c.request(http::verb::get, "/health").status, 200);
  EXPECT_EQ(c.request(http::verb::get, "/metrics").status, 200);
  EXPECT_EQ(c.post("/v1/completions", kProbe, "Bearer sk-test").status, 200);
}

TEST(ServerHttp, StreamEqualsNonStreamAndChatWorks) {
  LiveServer s;
  s.make_ready();
  Client c(s.port());
  json req = {{"prompt", "The quick brown fox"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  Reply full = c.post("/v1/completions", req);
  ASSERT_EQ(full.status, 200);
  const std::string text = full.j()["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  Reply st = c.post("/v1/completions", req);
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.content_type, "text/event-stream");
  json usage;
  EXPECT_EQ(stream_text(st.body, &usage), text);
  EXPECT_EQ(usage["completion_tokens"], 24);
  EXPECT_EQ(usage, full.j()["usage"]);

  Reply chat = c.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                               {"max_tokens", 3},
                                               {"temperature", 0},
                                               {"ignore_eos", true}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.j()["object"], "chat.completion");
  EXPECT_EQ(chat.j()["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat.j()["usage"]["completion_tokens"], 3);
  Reply tk = c.post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(tk.j()["count"], chat.j()["usage"]["prompt_tokens"]);
}

TEST(ServerHttp, DisconnectMidStreamAbortsAndFreesKv) {
  LiveServer s;
  s.make_ready();
  {
    Client c(s.port());
    std::string body =
        json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}}.dump();
    std::string raw =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    net::write(c.socket(), net::buffer(raw));
    // Wait for some streamed bytes: the request is running.
    std::string got;
    char buf[4096];
    while (got.find("data: ") == std::string::npos) {
      size_t n = c.socket().read_some(net::buffer(buf));
      got.append(buf, n);
    }
    EXPECT_GT(s.engine().counters().kv_usage, 0.0);
  }  // closed mid-stream
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  EngineCounters c;
  while (std::chrono::steady_clock::now() < deadline) {
    c = s.engine().counters();
    if (c.n_running == 0 && c.kv_usage == 0.0 && !s.engine().has_unfinished()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(c.n_running, 0);
  EXPECT_EQ(c.kv_usage, 0.0);
  EXPECT_LT(c.n_generation_tokens, 400);  // stopped early
  EXPECT_EQ(s.http().n_busy_connections(), 0);
}

TEST(ServerHttp, SizeLimits) {
  HttpLimits lim;
  lim.max_body_bytes = 1024;
  lim.max_header_bytes = 2048;
  LiveServer s(lim);
  s.make_ready();
  {
    Client c(s.port());
    Reply r = c.post("/v1/completions", {{"prompt", std::string(4096, 'a')}});
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.j()["error"]["code"], 413);
  }
  {
    Client c(s.port());
    http::request<http::string_body> req{http::verb::get, "/health", 11};
    req.set("X-Big", std::string(4096, 'b'));
    http::write(c.socket(), req);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    http::read(c.socket(), b, res);
    EXPECT_EQ(res.result_int(), 431u);
  }
  Client c(s.port());
  EXPECT_EQ(c.post("/v1/completions", kProbe).status, 200);
}

TEST(ServerHttp, IdleConnectionsTimeOut) {
  HttpLimits lim;
  lim.keep_alive = std::chrono::milliseconds(200);
  LiveServer s(lim);
  Client c(s.port());
  EXPECT_EQ(c.request(http::verb::get, "/version").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  char b;
  beast::error_code ec;
  c.socket().read_some(net::buffer(&b, 1), ec);
  EXPECT_EQ(ec, net::error::eof);  // the server closed the idle connection
}

}  // namespace
}  // namespace mla::server
