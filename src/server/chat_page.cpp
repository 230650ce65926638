// The chat page's routes (see chat_page.h).
#include "server/chat_page.h"

#include <string>
#include <utility>
#include <vector>

#include "server/router.h"

namespace mla::server {

namespace {

void add_file(Router& router, const std::string& path, std::string_view content_type, std::string_view body) {
  router.add(
      "GET", path,
      [content_type, body](const HttpRequest&, const std::shared_ptr<HttpResponder>& res) {
        std::vector<std::pair<std::string, std::string>> headers = {
            {"Content-Security-Policy", std::string(kChatPageCsp)},
            {"X-Content-Type-Options", "nosniff"},
            {"Referrer-Policy", "no-referrer"},
            // Revalidated on every load, so a new binary's page is never mixed with an old script.
            {"Cache-Control", "no-cache"},
        };
        res->send(200, std::string(content_type), std::string(body), std::move(headers));
      },
      Router::Access::kPublic);
}

}  // namespace

void register_chat_page(Router& router) {
  add_file(router, "/", "text/html; charset=utf-8", web::kChatHtml);
  add_file(router, "/chat.css", "text/css; charset=utf-8", web::kChatCss);
  add_file(router, "/chat.js", "text/javascript; charset=utf-8", web::kChatJs);
}

}  // namespace mla::server
