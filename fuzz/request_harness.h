#pragma once
// One request body through the request side of the API, as the HTTP handlers run it, without
// an engine, at two depths:
// - RequestHarness: JSON parse, the endpoint's parser (completions, chat with tools and content parts, the
//   Anthropic messages and count_tokens, tokenize, detokenize), the assistant-message and tool
//   checks, the chat template, the context check, the engine's own SamplingParams::validate, and
//   the SSE writer over what came out (fuzz/fuzz_request.cpp).
// - RequestParserHarness: the same without the chat template and the SSE writer on good inputs:
//   just parsing and validation, the per-input work of fuzz/fuzz_request_parser.cpp (the template
//   has its own target, fuzz_chat_template).
// Shared with tests/server/request_corpus_test.cpp (the checked-in seeds and past findings, in
// `make test`).
//
// The contract checked: a bad input is an ApiError (or mla::Error, which the router also turns
// into a 400) with a 4xx status and a one-line message; anything else thrown is a bug (the
// router would answer 500). A good input yields JSON the SSE writer can dump and parse back.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jinja/chat_template.h"
#include "server/anthropic_protocol.h"
#include "server/chat_tools.h"
#include "server/openai_protocol.h"
#include "server/sse.h"
#include "util/error.h"

namespace mla::fuzz {

// The endpoint is chosen by the first byte: one of these letters, else the byte modulo 6.
inline constexpr std::string_view kRequestEndpoints = "chmntd";  // completions, chat, messages,
                                                                 // count_tokens, tokenize, detokenize

// Thrown by the checks; not a std::exception, so nothing on the way catches it as a request error.
struct ContractBroken {
  std::string message;
};

[[noreturn]] inline void contract_broken(const char* what, const std::string& detail) {
  throw ContractBroken{std::string(what) + ": " + detail.substr(0, 2000)};
}

inline void check_error(int status, const std::string& message) {
  if (status < 400 || status > 499) contract_broken("bad input answered with a non-4xx status", message);
  if (message.empty() || message.find('\n') != std::string::npos)
    contract_broken("error message is empty or not one line", message);
}

// The SSE writer on a value the server would send: the event must parse back as JSON.
inline void check_sse(const server::json& j) {
  std::string ev = server::sse_event(j);
  if (ev.rfind("data: ", 0) != 0 || ev.size() < 8 || ev.compare(ev.size() - 2, 2, "\n\n") != 0)
    contract_broken("SSE framing", ev);
  std::string_view payload(ev.data() + 6, ev.size() - 8);
  if (payload.find('\n') != std::string_view::npos) contract_broken("SSE payload spans lines", ev);
  if (!nlohmann::json::accept(payload)) contract_broken("SSE payload does not parse back", ev);
}

// The parsers and validation only: what fuzz_request_parser runs per input. Nothing here
// references the chat template, so that target links without it.
class RequestParserHarness {
 public:
  virtual ~RequestParserHarness() = default;

  // "" when the input was handled as the contract says, else what was broken.
  std::string run(const uint8_t* data, size_t size) {
    try {
      run_checked(data, size);
    } catch (const ContractBroken& c) {
      return c.message;
    }
    return {};
  }

 protected:
  static constexpr int kVocab = 1000;
  static constexpr int kMaxModelLen = 4096;

  // A completions prompt given as text (nothing more to check here; RequestHarness checks it through
  // the SSE writer).
  virtual void text_prompt(const std::string& text) {}

  // What render_chat (server/served_model.h) and the context check do with the parsed messages;
  // here only their shape and max_tokens against the context (RequestHarness renders them).
  virtual void chat_prompt(const server::json& messages, const server::json& tools, const server::json& kwargs,
                           bool add_generation_prompt, std::optional<int> max_tokens) {
    check_messages(messages);
    server::check_context_length(1, max_tokens, kMaxModelLen);
  }

  static void check_messages(const server::json& messages) {
    if (!messages.is_array() || messages.empty()) contract_broken("parsed messages", messages.dump());
    for (const auto& m : messages)
      if (!m.is_object()) contract_broken("a parsed message is not an object", m.dump());
  }

 private:
  void run_checked(const uint8_t* data, size_t size) {
    if (size == 0) return;
    size_t pick = kRequestEndpoints.find(static_cast<char>(data[0]));
    if (pick == std::string_view::npos) pick = data[0] % kRequestEndpoints.size();
    std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
      handle(kRequestEndpoints[pick], body);
    } catch (const server::ApiError& e) {
      check_error(e.status(), e.what());
      check_sse(e.to_json());
      check_sse(server::anthropic_error_json(e));
    } catch (const Error& e) {
      check_error(400, e.what());
    } catch (const std::exception& e) {
      contract_broken("unexpected exception (the router would answer 500)", e.what());
    }
  }

  void handle(char endpoint, std::string_view raw) {
    const server::ModelLimits limits{kVocab, kMaxModelLen};
    server::json body = server::parse_json_object(raw);
    switch (endpoint) {
      case 'c': {
        server::CompletionRequest r = server::parse_completion_request(body, limits);
        r.params.validate(kVocab);
        for (const auto& p : r.prompts) {
          const int len = p.is_text ? static_cast<int>(p.text.size()) + 1 : static_cast<int>(p.ids.size());
          server::check_context_length(len, r.params.max_tokens, kMaxModelLen);
          if (p.is_text) text_prompt(p.text);
        }
        break;
      }
      case 'h': {
        server::ChatRequest r = server::parse_chat_request(body, limits);
        server::parse_tool_options(body, r.tools);
        server::prepare_assistant_messages(r.messages);
        r.params.validate(kVocab);
        chat_prompt(r.messages, r.tools, r.chat_template_kwargs, r.add_generation_prompt, r.max_tokens);
        break;
      }
      case 'm':
      case 'n': {
        server::AnthropicRequest r = server::parse_anthropic_request(body, limits, endpoint == 'n');
        server::prepare_assistant_messages(r.messages);
        if (endpoint == 'm') r.params.validate(kVocab);
        chat_prompt(r.messages, r.tools, r.chat_template_kwargs, !r.continue_final_message,
                    endpoint == 'm' ? std::optional<int>(r.params.max_tokens) : std::nullopt);
        break;
      }
      case 't': {
        server::TokenizeRequest r = server::parse_tokenize_request(body);
        if (r.is_chat) {
          server::prepare_assistant_messages(r.messages);
          chat_prompt(r.messages, r.tools, r.chat_template_kwargs, r.add_generation_prompt, std::nullopt);
        }
        break;
      }
      case 'd': {
        std::string model;
        for (int32_t id : server::parse_detokenize_request(body, limits, &model))
          if (id < 0 || id >= kVocab) contract_broken("detokenize accepted an id out of range", std::to_string(id));
        break;
      }
    }
  }
};

// The whole request side: the parsers, then the chat template and the SSE writer on what they
// accepted (fuzz_request).
class RequestHarness : public RequestParserHarness {
 private:
  void text_prompt(const std::string& text) override { check_sse({{"text", text}}); }

  void chat_prompt(const server::json& messages, const server::json& tools, const server::json& kwargs,
                   bool add_generation_prompt, std::optional<int> max_tokens) override {
    check_messages(messages);
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    for (const auto& [k, v] : kwargs.items()) ctx[k] = v;
    ctx["messages"] = messages;
    if (!tools.is_null()) ctx["tools"] = tools;
    ctx["add_generation_prompt"] = add_generation_prompt;
    ctx["bos_token"] = "<s>";
    std::string text = chat_.render(ctx);
    check_sse({{"prompt", text}});
    server::check_context_length(static_cast<int>(text.size()) + 1, max_tokens, kMaxModelLen);
  }

  ChatTemplate chat_{
      R"({{ bos_token }}{% for m in messages %}{{ m.role }}: {% if m.content is string %}{{ m.content }})"
      R"({% elif m.content %}{% for p in m.content %}{{ p.text if p.text is defined else '' }}{% endfor %})"
      R"({% endif %}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}
{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}assistant:{% endif %})"};
};

}  // namespace mla::fuzz
