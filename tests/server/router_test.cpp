// The router on its own: method + path dispatch, the 401/404/405 answers, public routes, prefix
// routes, and the error shape a protocol registers for its paths; a route added by one more module
// is served next to the others without touching them.
#include <gtest/gtest.h>

#include <stdexcept>

#include "../support/recording_responder.h"
#include "server/router.h"
#include "util/error.h"

namespace mla::server {
namespace {

std::shared_ptr<RecordingResponder> call(const Router& router, std::string method, std::string path,
                                         std::vector<std::pair<std::string, std::string>> headers = {}) {
  HttpRequest req;
  req.method = std::move(method);
  req.path = std::move(path);
  req.target = req.path;
  req.headers = std::move(headers);
  auto res = std::make_shared<RecordingResponder>();
  router.handle(std::move(req), res);
  return res;
}

Router::Handler answer(std::string text) {
  return [text](const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
    send_json(*res, 200, {{"text", text}, {"path", req.path}});
  };
}

TEST(ServerRouter, DispatchesByMethodAndPath) {
  Router r("");
  r.add("GET", "/a", answer("get a"));
  r.add("POST", "/a", answer("post a"));
  r.add_prefix("GET", "/items/", answer("item"));
  EXPECT_EQ(call(r, "GET", "/a")->j()["text"], "get a");
  EXPECT_EQ(call(r, "POST", "/a")->j()["text"], "post a");
  auto item = call(r, "GET", "/items/x/y");
  EXPECT_EQ(item->j()["text"], "item");
  EXPECT_EQ(item->content_type, "application/json");
  // The prefix alone is not a path of the prefix route.
  EXPECT_EQ(call(r, "GET", "/items/")->status, 404);

  auto missing = call(r, "GET", "/b");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->j()["error"]["code"], "not_found");
  EXPECT_EQ(missing->j()["error"]["message"], "no route for GET /b");

  auto wrong = call(r, "DELETE", "/a");
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->j()["error"]["message"], "method DELETE is not allowed for /a (use GET, POST)");
  ASSERT_EQ(wrong->headers.size(), 1u);
  EXPECT_EQ(wrong->headers[0], (std::pair<std::string, std::string>{"Allow", "GET, POST"}));
}

TEST(ServerRouter, ApiKeyOnEveryRouteButPublicOnes) {
  Router r("sk-test");
  r.add("GET", "/open", answer("open"), Router::Access::kPublic);
  r.add("GET", "/closed", answer("closed"));
  EXPECT_EQ(call(r, "GET", "/open")->status, 200);
  EXPECT_EQ(call(r, "POST", "/open")->status, 405);  // public: no key needed to learn the method
  auto denied = call(r, "GET", "/closed");
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(denied->j()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(call(r, "GET", "/unknown")->status, 401);  // the key first, then the path
  EXPECT_EQ(call(r, "GET", "/closed", {{"Authorization", "Bearer sk-wrong"}})->status, 401);
  EXPECT_EQ(call(r, "GET", "/closed", {{"Authorization", "Bearer sk-test"}})->status, 200);
  EXPECT_EQ(call(r, "GET", "/closed", {{"x-api-key", "sk-test"}})->status, 200);
  EXPECT_EQ(call(r, "GET", "/closed", {{"x-api-key", "sk-wrong"}})->status, 401);
}

TEST(ServerRouter, ErrorsTakeTheShapeOfTheirPath) {
  Router r("");
  auto fails = [](int status) {
    return [status](const HttpRequest&, const std::shared_ptr<HttpResponder>&) {
      throw ApiError(status, "no good", "field");
    };
  };
  r.add("POST", "/v1/other", fails(400));
  r.add("POST", "/v1/other/deeper",
        [](const HttpRequest&, const std::shared_ptr<HttpResponder>&) { throw Error("plain error"); });
  r.add("POST", "/v1/mine",
        [](const HttpRequest&, const std::shared_ptr<HttpResponder>&) { throw std::runtime_error("boom"); });
  r.set_error_shape("/v1/other", [](const ApiError& e) { return json{{"kind", "other"}, {"says", e.what()}}; });

  auto shaped = call(r, "POST", "/v1/other");
  EXPECT_EQ(shaped->status, 400);
  EXPECT_EQ(shaped->j(), (json{{"kind", "other"}, {"says", "no good"}}));
  auto plain = call(r, "POST", "/v1/other/deeper");  // mla::Error: 400
  EXPECT_EQ(plain->status, 400);
  EXPECT_EQ(plain->j()["says"], "plain error");
  EXPECT_EQ(call(r, "GET", "/v1/otherwise")->j()["kind"], "other");  // a 404 under the prefix

  auto internal = call(r, "POST", "/v1/mine");  // elsewhere: {"error": {...}}
  EXPECT_EQ(internal->status, 500);
  EXPECT_EQ(internal->j()["error"]["code"], "internal_error");
  EXPECT_EQ(internal->j()["error"]["message"], "internal error: boom");
  // A 405 keeps the default shape on every path.
  EXPECT_EQ(call(r, "GET", "/v1/other")->j()["error"]["code"], "method_not_allowed");
}

}  // namespace
}  // namespace mla::server
