#pragma once
// The model being served, and what every protocol does with it before a request reaches the
// engine: render a chat with the model's template, tokenize, compile an output constraint.
// Request errors are 400 ApiErrors naming the field.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "server/chat_output.h"
#include "server/chat_tools.h"
#include "server/json.h"

namespace mla {
class ChatTemplate;
class Tokenizer;
}  // namespace mla

namespace mla::server {

// What a chat template needs; the renderer returns the prompt text or throws mla::Error (a bad
// message list or a template error), which becomes a 400.
struct ChatPromptInput {
  const json& messages;
  const json& tools;   // null or array
  const json& kwargs;  // chat_template_kwargs: extra template variables
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};
using ChatRenderer = std::function<std::string(const ChatPromptInput&)>;

// The renderer of a model's chat template (src/jinja/): the template sees messages, tools (when
// given), add_generation_prompt, bos_token, eos_token and chat_template_kwargs, as transformers'
// apply_chat_template passes them. The tokenizer is read here, not kept.
ChatRenderer make_chat_renderer(std::shared_ptr<const ChatTemplate> tmpl, const Tokenizer& tok);

// The pointers must stay valid while the server runs.
struct ServedModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ChatRenderer render_chat;             // empty: the model has no chat template (chat requests → 400)
  std::string chat_template;            // the template's source, "" when none (/tokenizer_info)
  GrammarCompiler* grammars = nullptr;  // null: structured outputs answer 400
  int max_model_len = 0;
  int n_vocab = 0;
  ServerParsers parsers;  // tool-call and reasoning parsers (chat_tools.h)
};

// The chat's prompt text. 400: no chat template, continue_final_message without a final
// assistant message, a template error.
std::string render_chat(const ServedModel& model, const ChatPromptInput& in);
// Text with special tokens parsed; add_special: BOS (and EOS) as the vocabulary says.
std::vector<int32_t> tokenize(const ServedModel& model, const std::string& text, bool add_special);
// A rendered chat prompt: its own special tokens, plus BOS where the vocabulary wants one and
// the template did not write it.
std::vector<int32_t> tokenize_chat(const ServedModel& model, const std::string& rendered);

// Compiles an output constraint for SamplingParams::grammar (cached by spec). A spec that does
// not compile is a 400 naming `param` and the problem.
std::shared_ptr<const CompiledGrammar> compile_grammar(const ServedModel& model, const GrammarSpec& spec,
                                                       const std::string& param);
// tool_choice "required" / a named function: params.grammar constrains the output to calls in
// the syntax of parsing.tool_format (tool_choice.h). 400 when the request is constrained
// otherwise already (response_format, structured_outputs).
void constrain_to_tool_calls(const ServedModel& model, SamplingParams& params, const OutputParsing& parsing,
                             const json& tools, const ChatToolOptions& opts);

}  // namespace mla::server
