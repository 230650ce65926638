// libFuzzer target: arbitrary bytes as a chat template (and, after a NUL byte, as its JSON
// context). Parsing and rendering must end in output or mla::Error: no crash, no other exception,
// no sanitizer report.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "jinja/chat_template.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  size_t nul = input.find('\0');
  std::string source = input.substr(0, nul);
  nlohmann::ordered_json ctx = {
      {"messages",
       {{{"role", "system"}, {"content", "sys"}},
        {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", {{"a", 1.5}}}}}}}}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"}};
  if (nul != std::string::npos) {
    auto parsed = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) ctx = std::move(parsed);
  }
  mla::ChatRenderOptions opt;
  opt.now = std::tm{};
  try {
    mla::ChatTemplate tmpl(source);
    (void)tmpl.render(ctx, opt);
  } catch (const mla::Error&) {
  }
  return 0;
}
