#pragma once
// HTTP/1.1 server on Boost.Beast (Asio): keep-alive, size limits, timeouts, streamed (chunked)
// responses, client-disconnect notification and a graceful drain. It knows nothing about the
// APIs: every parsed request goes to one handler (the Router, router.h), which answers through an
// HttpResponder — right away or later, from any thread.
//
//   HttpServer http(cfg, handler);  http.start();   // binds, then serves on cfg.n_threads threads
//   ...                              http.drain();   // stop accepting, close idle connections
//                                    http.stop();    // close everything, join the threads
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mla::server {

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;             // request line + headers; over it: 431, then close
  size_t max_body_bytes = 16 * 1024 * 1024;        // over it: 413, then close
  std::chrono::milliseconds keep_alive{5000};      // idle wait for a request, and for each read of it
  std::chrono::milliseconds write_timeout{60000};  // one write to a client that stopped reading
};

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (see HttpServer::port())
  int n_threads = 2;     // I/O threads
  HttpLimits limits;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent
  std::string target;  // as sent, with the query string
  std::string path;    // target without the query string
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote;  // "ip:port" of the client

  // The first header with this name (case-insensitive), or "" when absent.
  std::string_view header(std::string_view name) const;
};

// The answer to one request: either send() once, or start_stream(), write() any number of
// times, end_stream(). Every method may be called from any thread; calls are applied in order on
// the connection's strand. Calls after the client went away are ignored.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;

  virtual void send(int status, std::string content_type, std::string body,
                    std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // Chunked response with status 200.
  virtual void start_stream(std::string content_type,
                            std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  virtual void write(std::string data) = 0;
  virtual void end_stream() = 0;

  // Called once, on an I/O thread, when the client disconnects (or a write to it fails or
  // times out) before the response is complete. Set at most once; if the client is already
  // gone, called right away on the calling thread.
  virtual void on_disconnect(std::function<void()> cb) = 0;
  virtual bool client_gone() const = 0;
};

using HttpHandler = std::function<void(HttpRequest&& req, std::shared_ptr<HttpResponder> res)>;

class HttpServer {
 public:
  // Throws mla::Error when the address cannot be resolved or bound.
  HttpServer(HttpServerConfig config, HttpHandler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (throws mla::Error: address in use, ...), then runs the I/O threads.
  void start();
  uint16_t port() const;  // the bound port
  // Stops accepting and closes connections that have no request in progress; connections
  // with a request in progress get "Connection: close" and are closed after their response.
  void drain();
  // Connections with a request whose response is not complete.
  int n_busy_connections() const;
  int n_open_connections() const;
  // Closes every connection and joins the I/O threads.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla::server
