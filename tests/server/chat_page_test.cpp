// The chat page's routes: the embedded files are the source files byte for byte (bytes above 0x7f
// included), served without the API key with their content types and the page's policy, while
// every other route still needs the key.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "../support/recording_responder.h"
#include "server/chat_page.h"
#include "server/router.h"

namespace mla::server {
namespace {

std::shared_ptr<RecordingResponder> get(const Router& router, const std::string& path) {
  HttpRequest req;
  req.method = "GET";
  req.path = path;
  req.target = path;
  auto res = std::make_shared<RecordingResponder>();
  router.handle(std::move(req), res);
  return res;
}

std::string source_file(const std::string& name) {
  std::ifstream f(std::string(MLA_SOURCE_DIR) + "/src/server/web/" + name, std::ios::binary);
  EXPECT_TRUE(f) << name;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(ChatPage, EmbeddedFilesAreTheSourceFiles) {
  EXPECT_EQ(web::kChatHtml, source_file("chat.html"));
  EXPECT_EQ(web::kChatCss, source_file("chat.css"));
  EXPECT_EQ(web::kChatJs, source_file("chat.js"));
  EXPECT_NE(web::kChatJs.find("\xE2\x80\xA6"), std::string_view::npos);  // "…": a byte above 0x7f survives
}

TEST(ChatPage, ServedWithoutTheKeyUnderThePolicy) {
  Router router("sk-test");
  register_chat_page(router);
  const struct {
    const char* path;
    const char* content_type;
    std::string_view body;
  } files[] = {{"/", "text/html; charset=utf-8", web::kChatHtml},
               {"/chat.css", "text/css; charset=utf-8", web::kChatCss},
               {"/chat.js", "text/javascript; charset=utf-8", web::kChatJs}};
  for (const auto& f : files) {
    auto res = get(router, f.path);
    EXPECT_EQ(res->status, 200) << f.path;
    EXPECT_EQ(res->content_type, f.content_type) << f.path;
    EXPECT_EQ(res->body, f.body) << f.path;
    EXPECT_EQ(res->header("Content-Security-Policy"), kChatPageCsp) << f.path;
    EXPECT_EQ(res->header("X-Content-Type-Options"), "nosniff") << f.path;
  }
  EXPECT_EQ(get(router, "/v1/models")->status, 401);
  EXPECT_EQ(get(router, "/chat")->status, 401);  // not a page route: the key comes first
}

}  // namespace
}  // namespace mla::server
