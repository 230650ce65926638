#pragma once
// Chat templates: a Jinja interpreter that renders Hugging Face chat templates byte for byte as
// transformers does (jinja2 ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
// loopcontrols, its tojson/raise_exception/strftime_now). Parse once, render many:
//
//   mla::ChatTemplate tmpl(source);                 // throws mla::Error on syntax errors
//   std::string prompt = tmpl.render(context);      // throws mla::Error on template errors
//
// The context is the template's variables: messages (role, content as a string or a list of
// parts, tool_calls, reasoning_content...), tools, add_generation_prompt, bos_token, eos_token and
// any extra template kwargs (enable_thinking, ...). Variables that transformers always passes
// (tools=None, documents=None) are the caller's to add; this renders exactly the given context.
// Errors read "chat template: line 12, column 5: unknown tag 'foo'"; raise_exception(msg) in a
// template gives an error ending in msg.
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mla {

struct ChatRenderOptions {
  // strftime_now()'s clock (local time); nullopt: the current time. Tests pin it.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Safe to call concurrently: rendering never modifies the parsed template.
  std::string render(const nlohmann::ordered_json& context, const ChatRenderOptions& opt = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;
};

// One-shot helpers. Use ordered_json to keep the key order of tool schemas (tojson prints keys
// in insertion order, as Python does); nlohmann::json sorts object keys.
std::string render_chat(const std::string& template_src, const nlohmann::ordered_json& context);
std::string render_chat(const std::string& template_src, const nlohmann::json& context);

}  // namespace mla
