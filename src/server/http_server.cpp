// HTTP/1.1 server: one Session per connection, all of its work on one strand. Responses (full or
// chunked) are written from a queue of raw bytes; while a request is in progress the socket is
// watched for readability so a client that closes the connection is noticed at once, not at
// the next failed write.
#include "server/http_server.h"

#include <fmt/format.h>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "util/error.h"
#include "util/log.h"

namespace mla::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

using Headers = std::vector<std::pair<std::string, std::string>>;

// A parse error in the request (as opposed to a socket error).
bool is_http_error(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

// Status line and headers, ending with the blank line.
std::string response_head(int status, std::string_view content_type, const Headers& headers, bool keep_alive,
                          std::optional<size_t> content_length) {
  std::string reason(http::obsolete_reason(static_cast<http::status>(status)));
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nServer: mla.cpp/{}\r\n", status, reason, MLA_VERSION);
  if (!content_type.empty()) out += fmt::format("Content-Type: {}\r\n", content_type);
  for (const auto& [k, v] : headers) out += fmt::format("{}: {}\r\n", k, v);
  if (content_length)
    out += fmt::format("Content-Length: {}\r\n", *content_length);
  else
    out += "Transfer-Encoding: chunked\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

}  // namespace

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

class Session;

// What the sessions share with the server; outlives both (held by shared_ptr).
struct Shared {
  HttpServerConfig config;
  HttpHandler handler;
  std::atomic<bool> draining{false};
  std::atomic<int> n_busy{0};
  std::mutex mu;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_session_id = 1;
};

class Responder;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<Shared> shared, uint64_t id)
      : stream_(std::move(socket)), shared_(std::move(shared)), id_(id) {
    beast::error_code ec;
    // Only asynchronous operations and the peek in on_watch use the socket: the peek must not
    // block.
    stream_.socket().non_blocking(true, ec);
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }
  ~Session() {
    std::lock_guard lk(shared_->mu);
    shared_->sessions.erase(id_);
  }

  void start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::do_read, shared_from_this()));
  }

  // Runs f on the session's strand.
  template <typename F>
  void post(F&& f) {
    net::post(stream_.get_executor(), std::forward<F>(f));
  }

  // On the strand. Closes the connection unless a request is in progress.
  void close_if_idle() {
    if (!responder_) close();
  }
  void close();

  // Called (on the strand) by the Responder.
  void respond_full(const Responder* r, int status, const std::string& content_type, std::string body,
                    const Headers& headers);
  void respond_start(const Responder* r, const std::string& content_type, const Headers& headers);
  void respond_chunk(const Responder* r, std::string data);
  void respond_end(const Responder* r);

 private:
  void do_read();
  void on_header(beast::error_code ec, size_t);
  void read_body();
  void on_body(beast::error_code ec, size_t);
  void start_watch();
  void on_watch(beast::error_code ec);
  void enqueue(std::string bytes);
  void flush();
  void on_written(beast::error_code ec, size_t);
  void finish_response();
  void client_gone();
  // Sends a complete error response outside the request/handler cycle, then closes
  // lingeringly (the client may still be sending a body we will not read).
  void reject_and_close(int status, std::string_view message);
  void linger();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<Shared> shared_;
  uint64_t id_;
  std::string remote_;

  std::shared_ptr<Responder> responder_;  // the request in progress, or null
  bool keep_alive_ = false;
  bool streaming_ = false;
  bool response_done_ = false;  // every byte of the response is queued
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool watch_disabled_ = false;  // the client sent more bytes (pipelining): stop watching
  bool close_after_write_ = false;
  bool linger_after_write_ = false;
  bool closed_ = false;

  std::deque<std::string> out_;
  std::string inflight_;
  bool writing_ = false;
  std::array<char, 4096> scratch_{};
  size_t lingered_ = 0;
};

class Responder : public HttpResponder {
 public:
  explicit Responder(std::shared_ptr<Session> s) : session_(std::move(s)) {}

  void send(int status, std::string content_type, std::string body, Headers headers) override {
    if (auto s = session())
      s->post([s, self = this, status, ct = std::move(content_type), b = std::move(body),
               h = std::move(headers)]() mutable { s->respond_full(self, status, ct, std::move(b), h); });
  }
  void start_stream(std::string content_type, Headers headers) override {
    if (auto s = session())
      s->post(
          [s, self = this, ct = std::move(content_type), h = std::move(headers)] { s->respond_start(self, ct, h); });
  }
  void write(std::string data) override {
    if (data.empty()) return;
    if (auto s = session())
      s->post([s, self = this, d = std::move(data)]() mutable { s->respond_chunk(self, std::move(d)); });
  }
  void end_stream() override {
    if (auto s = session()) s->post([s, self = this] { s->respond_end(self); });
  }
  void on_disconnect(std::function<void()> cb) override {
    std::unique_lock lk(mu_);
    if (gone_) {
      lk.unlock();
      if (cb) cb();
      return;
    }
    on_gone_ = std::move(cb);
  }
  bool client_gone() const override {
    std::lock_guard lk(mu_);
    return gone_;
  }

  // By the session (on its strand): the client went away; runs the callback.
  void mark_gone() {
    std::function<void()> cb;
    {
      std::lock_guard lk(mu_);
      if (gone_) return;
      gone_ = true;
      cb = std::move(on_gone_);
      session_.reset();
    }
    if (cb) cb();
  }
  // By the session once the response is complete: drop the callback (it may hold the request)
  // and the session (breaking the Session <-> Responder cycle); later calls do nothing.
  void release() {
    std::lock_guard lk(mu_);
    on_gone_ = nullptr;
    session_.reset();
  }

 private:
  std::shared_ptr<Session> session() const {
    std::lock_guard lk(mu_);
    return session_;
  }

  mutable std::mutex mu_;
  std::shared_ptr<Session> session_;
  bool gone_ = false;
  std::function<void()> on_gone_;
};

void Session::close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
  // A request still in progress (the server is stopping): to it the client is gone. This also
  // breaks the Session <-> Responder reference cycle, which would otherwise keep both alive once
  // the socket's handlers have returned (LeakSanitizer found it).
  if (auto r = std::move(responder_)) {
    shared_->n_busy.fetch_sub(1);
    r->mark_gone();
  }
}

void Session::do_read() {
  if (closed_) return;
  if (shared_->draining) return close();
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(shared_->config.limits.max_header_bytes));
  parser_->body_limit(shared_->config.limits.max_body_bytes);
  stream_.expires_after(shared_->config.limits.keep_alive);
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Session::on_header, shared_from_this()));
}

void Session::on_header(beast::error_code ec, size_t) {
  if (closed_) return;
  if (ec == http::error::header_limit)
    return reject_and_close(431, "request headers are larger than the server's limit");
  // The parser checks Content-Length against the body limit with the header.
  if (ec == http::error::body_limit)
    return reject_and_close(413, fmt::format("request body is over the limit of {} bytes "
                                             "(--max-request-bytes)",
                                             shared_->config.limits.max_body_bytes));
  // A timeout has already closed the socket (tcp_stream does): nothing can be sent.
  if (ec == http::error::end_of_stream || ec == beast::error::timeout) return close();
  if (ec) {
    if (is_http_error(ec)) return reject_and_close(400, fmt::format("malformed HTTP request: {}", ec.message()));
    return close();
  }
  if (shared_->draining) return close();
  auto& req = parser_->get();
  if (auto len = parser_->content_length(); len && *len > shared_->config.limits.max_body_bytes) {
    return reject_and_close(413, fmt::format("request body of {} bytes is over the limit of {} bytes "
                                             "(--max-request-bytes)",
                                             *len, shared_->config.limits.max_body_bytes));
  }
  if (iequals(std::string(req[http::field::expect]), "100-continue") && !parser_->is_done()) {
    // curl waits for this before sending a body over 1 KiB.
    inflight_ = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(shared_->config.limits.write_timeout);
    net::async_write(stream_, net::buffer(inflight_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->read_body();
    });
    return;
  }
  read_body();
}

void Session::read_body() {
  if (closed_) return;
  stream_.expires_after(shared_->config.limits.keep_alive);
  http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_body, shared_from_this()));
}

void Session::on_body(beast::error_code ec, size_t) {
  if (closed_) return;
  if (ec == http::error::body_limit)
    return reject_and_close(413, fmt::format("request body is over the limit of {} bytes "
                                             "(--max-request-bytes)",
                                             shared_->config.limits.max_body_bytes));
  if (ec) {
    if (is_http_error(ec) && ec != http::error::end_of_stream)
      return reject_and_close(400, fmt::format("malformed HTTP request: {}", ec.message()));
    return close();
  }
  auto msg = parser_->release();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) req.headers.emplace_back(f.name_string(), f.value());
  req.body = std::move(msg.body());
  req.remote = remote_;
  keep_alive_ = msg.keep_alive();
  watch_disabled_ = false;
  streaming_ = false;
  response_done_ = false;
  close_after_write_ = false;
  linger_after_write_ = false;
  stream_.expires_never();

  auto r = std::make_shared<Responder>(shared_from_this());
  responder_ = r;
  shared_->n_busy.fetch_add(1);
  start_watch();
  try {
    shared_->handler(std::move(req), r);
  } catch (const std::exception& e) {
    log().error("http: handler threw: {}", e.what());
    static_cast<HttpResponder&>(*r).send(
        500, "application/json",
        R"({"error":{"message":"internal server error","type":"internal_error","param":null,"code":500}})");
  }
}

void Session::start_watch() {
  if (watching_ || watch_disabled_ || closed_) return;
  watching_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read,
                              beast::bind_front_handler(&Session::on_watch, shared_from_this()));
}

void Session::on_watch(beast::error_code ec) {
  watching_ = false;
  if (closed_) return;
  if (!responder_) {  // the response completed meanwhile: go on to the next request
    if (read_after_watch_) {
      read_after_watch_ = false;
      do_read();
    }
    return;
  }
  if (ec == net::error::operation_aborted) return;
  if (!ec) {
    // Readiness can be reported spuriously: peek without blocking (the socket is in
    // non-blocking mode) and watch again if there is nothing after all.
    char c;
    size_t n = stream_.socket().receive(net::buffer(&c, 1), tcp::socket::message_peek, ec);
    if (ec == net::error::would_block || ec == net::error::try_again || ec == net::error::interrupted)
      return start_watch();
    if (!ec && n > 0) {  // pipelined bytes: leave them for the next read
      watch_disabled_ = true;
      return;
    }
  }
  client_gone();
}

void Session::client_gone() {
  if (!responder_) return close();
  auto r = std::move(responder_);
  shared_->n_busy.fetch_sub(1);
  close();
  r->mark_gone();
}

void Session::respond_full(const Responder* r, int status, const std::string& content_type, std::string body,
                           const Headers& headers) {
  if (closed_ || responder_.get() != r || streaming_ || response_done_) return;
  bool keep = keep_alive_ && !shared_->draining;
  close_after_write_ = !keep;
  enqueue(response_head(status, content_type, headers, keep, body.size()));
  enqueue(std::move(body));
  response_done_ = true;
  flush();
}

void Session::respond_start(const Responder* r, const std::string& content_type, const Headers& headers) {
  if (closed_ || responder_.get() != r || streaming_ || response_done_) return;
  streaming_ = true;
  bool keep = keep_alive_ && !shared_->draining;
  close_after_write_ = !keep;
  enqueue(response_head(200, content_type, headers, keep, std::nullopt));
  flush();
}

void Session::respond_chunk(const Responder* r, std::string data) {
  if (closed_ || responder_.get() != r || !streaming_ || response_done_) return;
  enqueue(fmt::format("{:x}\r\n", data.size()));
  enqueue(std::move(data));
  enqueue("\r\n");
  flush();
}

void Session::respond_end(const Responder* r) {
  if (closed_ || responder_.get() != r || !streaming_ || response_done_) return;
  enqueue("0\r\n\r\n");
  response_done_ = true;
  flush();
}

void Session::enqueue(std::string bytes) { out_.push_back(std::move(bytes)); }

void Session::flush() {
  if (writing_ || closed_) return;
  if (out_.empty()) {
    if (response_done_ && responder_) finish_response();
    return;
  }
  inflight_.clear();
  while (!out_.empty()) {
    inflight_ += out_.front();
    out_.pop_front();
  }
  writing_ = true;
  stream_.expires_after(shared_->config.limits.write_timeout);
  net::async_write(stream_, net::buffer(inflight_),
                   beast::bind_front_handler(&Session::on_written, shared_from_this()));
}

void Session::on_written(beast::error_code ec, size_t) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    out_.clear();
    if (linger_after_write_) return close();
    return client_gone();
  }
  if (linger_after_write_) return linger();
  flush();
}

void Session::finish_response() {
  auto r = std::move(responder_);
  shared_->n_busy.fetch_sub(1);
  r->release();
  stream_.expires_never();
  if (close_after_write_ || shared_->draining) {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    return close();
  }
  if (watching_) {
    read_after_watch_ = true;
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  do_read();
}

void Session::reject_and_close(int status, std::string_view message) {
  nlohmann::json err = {
      {"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", status}}}};
  std::string body = err.dump();
  enqueue(response_head(status, "application/json", {}, false, body.size()));
  enqueue(std::move(body));
  linger_after_write_ = true;
  flush();
}

// After an early error response: stop sending, read and discard what the client still sends
// (so closing does not reset the connection before it reads the response), for a bounded time
// and size.
void Session::linger() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(2));
  stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->lingered_ += n;
    if (ec || self->lingered_ > 4 * self->shared_->config.limits.max_body_bytes + (1 << 20)) return self->close();
    self->linger();
  });
}

// ---------------------------------------------------------------------------------------------

struct HttpServer::Impl {
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  uint16_t bound_port = 0;
  bool started = false, stopped = false;

  explicit Impl(int n_threads) : ioc(n_threads) {}

  void do_accept() {
    acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec && !shared->draining) {
        beast::error_code ig;
        s.set_option(tcp::no_delay(true), ig);
        std::shared_ptr<Session> session;
        {
          std::lock_guard lk(shared->mu);
          uint64_t id = shared->next_session_id++;
          session = std::make_shared<Session>(std::move(s), shared, id);
          shared->sessions.emplace(id, session);
        }
        session->start();
      } else if (ec) {
        log().warn("http: accept failed: {}", ec.message());
      }
      if (!shared->draining) do_accept();
    });
  }

  template <typename F>
  void for_each_session(F f) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard lk(shared->mu);
      for (auto& [id, w] : shared->sessions)
        if (auto s = w.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) f(s);
  }
};

HttpServer::HttpServer(HttpServerConfig config, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::max(1, config.n_threads))) {
  if (config.n_threads < 1) fail("http: --http-threads must be >= 1, got {}", config.n_threads);
  impl_->shared->config = std::move(config);
  impl_->shared->handler = std::move(handler);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  if (impl_->started) return;
  const auto& cfg = impl_->shared->config;
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto results =
      resolver.resolve(cfg.host, std::to_string(cfg.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) fail("http: cannot resolve host '{}': {}", cfg.host, ec ? ec.message() : "no address");
  tcp::endpoint ep = results.begin()->endpoint();
  auto& acc = impl_->acceptor.emplace(net::make_strand(impl_->ioc));
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (ec) fail("http: cannot bind {}:{}: {}", cfg.host, cfg.port, ec.message());
  acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("http: cannot listen on {}:{}: {}", cfg.host, cfg.port, ec.message());
  impl_->bound_port = acc.local_endpoint().port();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->do_accept();
  for (int i = 0; i < cfg.n_threads; ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->started = true;
}

uint16_t HttpServer::port() const { return impl_->bound_port; }

void HttpServer::drain() {
  if (!impl_->started || impl_->shared->draining.exchange(true)) return;
  net::post(impl_->acceptor->get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor->close(ec);
  });
  impl_->for_each_session([](const std::shared_ptr<Session>& s) { s->post([s] { s->close_if_idle(); }); });
}

int HttpServer::n_busy_connections() const { return impl_->shared->n_busy.load(); }

int HttpServer::n_open_connections() const {
  std::lock_guard lk(impl_->shared->mu);
  int n = 0;
  for (auto& [id, w] : impl_->shared->sessions) n += !w.expired();
  return n;
}

void HttpServer::stop() {
  if (!impl_->started || impl_->stopped) return;
  impl_->stopped = true;
  impl_->shared->draining = true;
  net::post(impl_->acceptor->get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor->close(ec);
  });
  impl_->for_each_session([](const std::shared_ptr<Session>& s) { s->post([s] { s->close(); }); });
  impl_->work.reset();
  // Closed sockets complete their pending operations at once; give the threads a moment to
  // run those handlers, then stop whatever is left (timers of lingering closes).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (n_open_connections() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace mla::server
