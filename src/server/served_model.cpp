// What every protocol does with the served model (see served_model.h).
#include "server/served_model.h"

#include <fmt/format.h>

#include "jinja/chat_template.h"
#include "server/api_error.h"
#include "server/tool_choice.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mla::server {

ChatRenderer make_chat_renderer(std::shared_ptr<const ChatTemplate> tmpl, const Tokenizer& tok) {
  auto special_text = [&tok](TokenId id) {
    return tok.is_valid(id) ? std::string(tok.token_bytes(id, true)) : std::string();
  };
  std::string bos = special_text(tok.vocab().bos), eos = special_text(tok.vocab().eos);
  return [tmpl = std::move(tmpl), bos, eos](const ChatPromptInput& in) {
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    for (const auto& [k, v] : in.kwargs.items()) ctx[k] = v;
    ctx["messages"] = in.messages;
    if (!in.tools.is_null()) ctx["tools"] = in.tools;
    ctx["add_generation_prompt"] = in.add_generation_prompt;
    ctx["bos_token"] = bos;
    ctx["eos_token"] = eos;
    std::string text = tmpl->render(ctx);
    if (in.continue_final_message) {
      // End the prompt right after the final (assistant) message's text, so the model
      // continues it instead of starting a new turn.
      const std::string last = string_or_empty(in.messages.back(), "content");
      const size_t at = last.empty() ? std::string::npos : text.rfind(last);
      if (at == std::string::npos)
        fail("continue_final_message: the final message's text is not in the rendered prompt");
      text.resize(at + last.size());
    }
    return text;
  };
}

std::string render_chat(const ServedModel& model, const ChatPromptInput& in) {
  if (!model.render_chat)
    bad_request("this model has no chat template; use /v1/completions", "messages", "no_chat_template");
  if (in.continue_final_message && string_or_empty(in.messages.back(), "role") != "assistant")
    bad_request("'continue_final_message' needs the last message to be from the assistant", "continue_final_message");
  try {
    return model.render_chat(in);
  } catch (const Error& e) {
    bad_request(fmt::format("chat template: {}", e.what()), "messages", "chat_template_error");
  }
}

std::vector<int32_t> tokenize(const ServedModel& model, const std::string& text, bool add_special) {
  EncodeOptions opt;
  opt.add_special = add_special;
  opt.parse_special = true;
  return model.tokenizer->encode(text, opt);
}

std::vector<int32_t> tokenize_chat(const ServedModel& model, const std::string& rendered) {
  // Templates of models whose vocabulary says add_bos mostly write BOS themselves (DeepSeek's
  // do); some do not (the embedded tiny model's). BOS is prepended only when missing, so neither
  // kind ends up with none or with two.
  std::vector<int32_t> ids = tokenize(model, rendered, /*add_special=*/false);
  const Tokenizer& tok = *model.tokenizer;
  const int32_t bos = tok.vocab().bos;
  if (tok.add_bos() && tok.is_valid(bos) && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

std::shared_ptr<const CompiledGrammar> compile_grammar(const ServedModel& model, const GrammarSpec& spec,
                                                       const std::string& param) {
  if (!model.grammars) bad_request("structured outputs are not available on this server", param, "unsupported");
  try {
    return model.grammars->compile(spec);
  } catch (const Error& e) {
    bad_request(fmt::format("'{}': {}", param, e.what()), param);
  }
}

void constrain_to_tool_calls(const ServedModel& model, SamplingParams& params, const OutputParsing& parsing,
                             const json& tools, const ChatToolOptions& opts) {
  if (params.grammar)
    bad_request(
        "'tool_choice' \"required\" or a named function cannot be combined with another output "
        "constraint ('response_format', 'structured_outputs')",
        "tool_choice");
  const int max_ws = model.grammars ? model.grammars->json_max_whitespace() : 0;
  params.grammar = compile_grammar(
      model, tool_call_grammar(*parsing.tool_format, tools, opts, parsing.reasoning_open.value_or(false), max_ws),
      "tool_choice");
}

}  // namespace mla::server
