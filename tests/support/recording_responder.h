#pragma once
// An HttpResponder that records what a handler or the router sent (status, content type, body,
// headers): the server tests' stand-in for a connection. Streams are ignored.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "server/json.h"
#include "server/router.h"

namespace mla::server {

class RecordingResponder : public HttpResponder {
 public:
  void send(int s, std::string type, std::string b, std::vector<std::pair<std::string, std::string>> h) override {
    status = s;
    content_type = std::move(type);
    body = std::move(b);
    headers = std::move(h);
  }
  void start_stream(std::string, std::vector<std::pair<std::string, std::string>>) override {}
  void write(std::string) override {}
  void end_stream() override {}
  void on_disconnect(std::function<void()>) override {}
  bool client_gone() const override { return false; }

  json j() const { return json::parse(body); }
  // The first header of that name, or "".
  std::string header(const std::string& name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return "";
  }

  int status = 0;
  std::string content_type, body;
  std::vector<std::pair<std::string, std::string>> headers;
};

}  // namespace mla::server
