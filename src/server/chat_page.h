#pragma once
// The built-in chat page: GET / answers src/server/web/chat.html, which loads /chat.css and
// /chat.js; the page talks to /v1/models, /v1/chat/completions and /metrics (docs/API.md, "The
// chat page"). The three files are compiled in (cmake/embed_files.cmake), so the binary serves
// them with no file or network access. They are public (no API key): the page asks for the key and sends it
// with its API calls. Every answer carries a Content-Security-Policy that allows only this
// server's own script, style and fetches, and no HTML built from strings (Trusted Types).
#include <string_view>

namespace mla::server {

class Router;

namespace web {
// The files' bytes (generated: build/generated/chat_page_assets.cpp).
extern const std::string_view kChatHtml;
extern const std::string_view kChatCss;
extern const std::string_view kChatJs;
}  // namespace web

// The policy sent with the page and its files.
inline constexpr std::string_view kChatPageCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; "
    "trusted-types 'none'";

// GET /, /chat.css, /chat.js (public routes).
void register_chat_page(Router& router);

}  // namespace mla::server
