#include "jinja/chat_template.h"

#include <fmt/format.h>

#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "util/error.h"

namespace mla {
namespace {

// Errors are one line: newlines in a message (from raise_exception, say) are written as \n.
std::string one_line(const std::string& msg) {
  std::string out;
  for (char c : msg) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else
      out.push_back(c);
  }
  return out;
}

[[noreturn]] void rethrow(const jinja::Error& e) {
  if (e.line > 0) fail("chat template: line {}, column {}: {}", e.line, e.column, one_line(e.message));
  fail("chat template: {}", one_line(e.message));
}

}  // namespace

struct ChatTemplate::Parsed {
  jinja::Body body;
  std::vector<std::string> root_undefined;
};

ChatTemplate::ChatTemplate(std::string source) : source_(std::move(source)), parsed_(std::make_unique<Parsed>()) {
  try {
    parsed_->body = jinja::parse(jinja::tokenize(source_));
    parsed_->root_undefined = jinja::root_assigned_first(parsed_->body);
  } catch (const jinja::Error& e) {
    rethrow(e);
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const ChatRenderOptions& opt) const {
  if (!context.is_object()) fail("chat template: the context must be a JSON object, got {}", context.type_name());
  try {
    jinja::RenderOptions ro;
    ro.now = opt.now;
    jinja::Interpreter in(ro);
    return in.render(parsed_->body, jinja::Value::from_json(context), parsed_->root_undefined);
  } catch (const jinja::Error& e) {
    rethrow(e);
  } catch (const std::bad_alloc&) {
    fail("chat template: out of memory while rendering");
  }
}

std::string render_chat(const std::string& template_src, const nlohmann::ordered_json& context) {
  return ChatTemplate(template_src).render(context);
}

std::string render_chat(const std::string& template_src, const nlohmann::json& context) {
  return ChatTemplate(template_src).render(nlohmann::ordered_json(context));
}

}  // namespace mla
