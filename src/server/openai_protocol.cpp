// OpenAI request parsing/validation and response shaping (see openai_protocol.h).
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace mla::server {

namespace {

[[noreturn]] void wrong_type(const char* name, const char* expected, const json& v) {
  bad_request(fmt::format("'{}' must be {}, got {}", name, expected, v.type_name()), name, "invalid_type");
}

std::optional<std::string> get_string(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

// Integers, or floats with an integral value (1.0), within int64.
std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<int64_t> get_int(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  auto i = as_int(*v);
  if (!i) wrong_type(name, "an integer", *v);
  return i;
}

std::optional<double> get_number(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  return v->get<double>();
}

[[noreturn]] void out_of_range(const char* name, std::string_view rule, const std::string& got) {
  bad_request(fmt::format("'{}' must be {}, got {}", name, rule, got), name);
}

// int field within [lo, hi].
std::optional<int> get_int_in(const json& body, const char* name, int64_t lo, int64_t hi, std::string_view rule) {
  auto v = get_int(body, name);
  if (v && (*v < lo || *v > hi)) out_of_range(name, rule, std::to_string(*v));
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

int32_t token_id(const json& v, const char* name, int n_vocab) {
  auto id = as_int(v);
  if (!id) wrong_type(name, "a list of token ids (integers)", v);
  if (*id < 0 || *id >= n_vocab)
    bad_request(fmt::format("'{}': token id {} is out of range [0, {})", name, *id, n_vocab), name);
  return static_cast<int32_t>(*id);
}

// The sampling fields shared by completions and chat. max_tokens is left to the caller.
void parse_sampling(const json& body, const ModelLimits& lim, SamplingParams& p) {
  auto finite = [](const char* name, double d) {
    if (!std::isfinite(d)) out_of_range(name, "a finite number", fmt::format("{}", d));
    return d;
  };
  if (auto n = get_int_in(body, "n", 1, 128, "in [1, 128]")) p.n = *n;
  if (auto t = get_number(body, "temperature")) {
    if (finite("temperature", *t) < 0) out_of_range("temperature", ">= 0", fmt::format("{}", *t));
    p.temperature = static_cast<float>(*t);
  }
  if (auto t = get_number(body, "top_p")) {
    if (finite("top_p", *t) <= 0 || *t > 1) out_of_range("top_p", "in (0, 1]", fmt::format("{}", *t));
    p.top_p = static_cast<float>(*t);
  }
  if (auto k = get_int_in(body, "top_k", -1, std::numeric_limits<int32_t>::max(), "-1 or 0 (off) or >= 1"))
    p.top_k = *k < 0 ? 0 : *k;
  if (auto m = get_number(body, "min_p")) {
    if (finite("min_p", *m) < 0 || *m > 1) out_of_range("min_p", "in [0, 1]", fmt::format("{}", *m));
    p.min_p = static_cast<float>(*m);
  }
  if (auto s = get_int(body, "seed")) p.seed = static_cast<uint64_t>(*s);
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (auto v = get_number(body, name)) {
      if (finite(name, *v) < -2 || *v > 2) out_of_range(name, "in [-2, 2]", fmt::format("{}", *v));
      (name[0] == 'p' ? p.presence_penalty : p.frequency_penalty) = static_cast<float>(*v);
    }
  }
  if (auto r = get_number(body, "repetition_penalty")) {
    if (finite("repetition_penalty", *r) <= 0) out_of_range("repetition_penalty", "> 0", fmt::format("{}", *r));
    p.repetition_penalty = static_cast<float>(*r);
  }
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", "an object of token id → bias", *lb);
    for (const auto& [key, val] : lb->items()) {
      int64_t id = -1;
      size_t used = 0;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size())
        bad_request(fmt::format("'logit_bias' keys must be token ids, got '{}'", key), "logit_bias");
      if (id < 0 || id >= lim.n_vocab)
        bad_request(fmt::format("'logit_bias': token id {} is out of range [0, {})", id, lim.n_vocab), "logit_bias");
      if (!val.is_number()) wrong_type("logit_bias", "an object with number values", val);
      double b = val.get<double>();
      if (!std::isfinite(b) || b < -100 || b > 100)
        out_of_range("logit_bias", "in [-100, 100] for every token", fmt::format("{}", b));
      p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
    }
  }
  if (const json* st = field(body, "stop")) {
    if (st->is_string()) {
      p.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (const auto& s : *st) {
        if (!s.is_string()) wrong_type("stop", "a string or a list of strings", s);
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or a list of strings", *st);
    }
    for (const auto& s : p.stop)
      if (s.empty()) bad_request("'stop' strings must not be empty", "stop");
  }
  if (const json* st = field(body, "stop_token_ids")) {
    if (!st->is_array()) wrong_type("stop_token_ids", "a list of token ids", *st);
    for (const auto& v : *st) p.stop_token_ids.push_back(token_id(v, "stop_token_ids", lim.n_vocab));
  }
  if (auto v = get_bool(body, "ignore_eos")) p.ignore_eos = *v;
  if (auto v = get_int_in(body, "min_tokens", 0, std::numeric_limits<int32_t>::max(), ">= 0")) p.min_tokens = *v;
  if (auto v = get_bool(body, "include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = get_bool(body, "skip_special_tokens")) p.skip_special_tokens = *v;
}

// stream + stream_options.include_usage.
void parse_stream(const json& body, bool& stream, bool& include_usage) {
  stream = get_bool(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (!stream) bad_request("'stream_options' can only be given when 'stream' is true", "stream_options");
    include_usage = get_bool(*so, "include_usage").value_or(false);
  }
}

void check_max_tokens(SamplingParams& p, std::optional<int> max_tokens, const char* name) {
  if (max_tokens) p.max_tokens = *max_tokens;
  if (p.min_tokens > p.max_tokens)
    bad_request(fmt::format("'min_tokens' ({}) must not exceed '{}' ({})", p.min_tokens, name, p.max_tokens),
                "min_tokens");
}

// Chat message content: a string, null, or a list of {"type": "text", "text": ...} parts
// (joined with "\n"). Other part types are not supported by a text-only model.
json normalize_content(const json& content, size_t i) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array())
    bad_request(fmt::format("messages[{}].content must be a string or a list of parts, got {}", i, content.type_name()),
                "messages");
  std::string text;
  bool first = true;
  for (const auto& part : content) {
    if (!part.is_object()) bad_request(fmt::format("messages[{}].content parts must be objects", i), "messages");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      bad_request(fmt::format("messages[{}].content part has no 'type'", i), "messages");
    if (*type != "text")
      bad_request(
          fmt::format("messages[{}].content part type '{}' is not supported (text only)", i, type->get<std::string>()),
          "messages");
    auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      bad_request(fmt::format("messages[{}].content text part has no 'text' string", i), "messages");
    if (!first) text += '\n';
    text += t->get<std::string>();
    first = false;
  }
  return text;
}

json normalize_messages(const json& body) {
  const json* msgs = field(body, "messages");
  if (!msgs) bad_request("'messages' is required", "messages", "missing_field");
  if (!msgs->is_array()) wrong_type("messages", "a list of messages", *msgs);
  if (msgs->empty()) bad_request("'messages' must not be empty", "messages");
  json out = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    if (!m.is_object())
      bad_request(fmt::format("messages[{}] must be an object, got {}", i, m.type_name()), "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      bad_request(fmt::format("messages[{}] has no 'role' string", i), "messages");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      bad_request(fmt::format("messages[{}].role '{}' is not one of system, developer, user, "
                              "assistant, tool",
                              i, r),
                  "messages");
    json nm = m;
    auto c = m.find("content");
    nm["content"] = normalize_content(c == m.end() ? json(nullptr) : *c, i);
    if (nm["content"].is_null() && r != "assistant")
      bad_request(fmt::format("messages[{}] ({}) has no 'content'", i, r), "messages");
    out.push_back(std::move(nm));
  }
  return out;
}

void parse_chat_options(const json& body, json& tools, json& kwargs, bool& add_generation_prompt,
                        bool& continue_final_message) {
  if (const json* t = field(body, "tools")) {
    if (!t->is_array()) wrong_type("tools", "a list", *t);
    tools = *t;
  }
  if (const json* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
    kwargs = *k;
  }
  add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  continue_final_message = get_bool(body, "continue_final_message").value_or(false);
  if (add_generation_prompt && continue_final_message && field(body, "add_generation_prompt"))
    bad_request("'add_generation_prompt' and 'continue_final_message' cannot both be true", "continue_final_message");
  if (continue_final_message) add_generation_prompt = false;
}

// response_format → its constraint (nullopt: text).
std::optional<StructuredOutput> parse_response_format(const json& body) {
  const json* rf = field(body, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
  auto t = rf->find("type");
  if (t == rf->end() || !t->is_string())
    bad_request("'response_format.type' must be one of text, json_object, json_schema", "response_format");
  const std::string type = t->get<std::string>();
  if (type == "json_object") return StructuredOutput{GrammarSpec::json_object(), "response_format"};
  if (type == "text") return std::nullopt;
  if (type != "json_schema")
    bad_request(fmt::format("'response_format.type' must be one of text, json_object, "
                            "json_schema, got '{}'",
                            type),
                "response_format", "unsupported");
  const json* js = field(*rf, "json_schema");
  if (!js)
    bad_request("'response_format.json_schema' is required for type json_schema", "response_format", "missing_field");
  if (!js->is_object()) wrong_type("response_format.json_schema", "an object", *js);
  if (const json* name = field(*js, "name"); name && !name->is_string())
    wrong_type("response_format.json_schema.name", "a string", *name);
  if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
    wrong_type("response_format.json_schema.strict", "a boolean", *strict);
  const json* schema = field(*js, "schema");
  if (!schema) bad_request("'response_format.json_schema.schema' is required", "response_format", "missing_field");
  if (!schema->is_object() && !schema->is_boolean())
    wrong_type("response_format.json_schema.schema", "a JSON Schema object", *schema);
  return StructuredOutput{GrammarSpec::json_schema(schema->dump()), "response_format"};
}

// The structured_outputs object, or nullptr. vLLM's older top-level names (guided_json,
// guided_regex, guided_choice, guided_grammar, guided_whitespace_pattern) are read as the
// structured_outputs fields they became, gathered into `legacy`.
const json* structured_outputs_field(const json& body, json& legacy) {
  const json* so = field(body, "structured_outputs");
  for (const char* key : {"json", "regex", "choice", "grammar", "whitespace_pattern"}) {
    if (const json* v = field(body, fmt::format("guided_{}", key).c_str())) {
      if (so)
        bad_request(fmt::format("'guided_{}' and 'structured_outputs' cannot be used together", key),
                    "structured_outputs");
      legacy[key] = *v;
    }
  }
  return legacy.is_null() ? so : &legacy;
}

// The constraint kinds a structured_outputs object gives, in the order read.
std::vector<GrammarSpec> structured_output_specs(const json& so) {
  std::vector<GrammarSpec> specs;
  auto string_of = [&](const char* key) -> std::optional<std::string> {
    const json* v = field(so, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(fmt::format("structured_outputs.{}", key).c_str(), "a string", *v);
    return v->get<std::string>();
  };
  if (const json* j = field(so, "json")) {
    if (j->is_string())
      specs.push_back(GrammarSpec::json_schema(j->get<std::string>()));
    else if (j->is_object() || j->is_boolean())
      specs.push_back(GrammarSpec::json_schema(j->dump()));
    else
      wrong_type("structured_outputs.json", "a JSON Schema (object or string)", *j);
  }
  if (auto r = string_of("regex")) specs.push_back(GrammarSpec::regex(*r));
  if (const json* c = field(so, "choice")) {
    if (!c->is_array() || c->empty())
      bad_request("'structured_outputs.choice' must be a non-empty list of strings", "structured_outputs");
    std::vector<std::string> choices;
    for (const auto& v : *c) {
      if (!v.is_string()) wrong_type("structured_outputs.choice", "a list of strings", v);
      choices.push_back(v.get<std::string>());
    }
    specs.push_back(GrammarSpec::choice(std::move(choices)));
  }
  if (auto g = string_of("grammar")) specs.push_back(GrammarSpec::ebnf(*g));
  if (auto t = string_of("structural_tag")) specs.push_back(GrammarSpec::structural_tag(*t));
  if (const json* jo = field(so, "json_object")) {
    if (!jo->is_boolean()) wrong_type("structured_outputs.json_object", "a boolean", *jo);
    if (jo->get<bool>()) specs.push_back(GrammarSpec::json_object());
  }
  if (field(so, "whitespace_pattern"))
    bad_request("'structured_outputs.whitespace_pattern' is not supported", "structured_outputs", "unsupported");
  return specs;
}

// response_format / structured_outputs → the grammar to constrain the output with (nullopt:
// free text). structured_outputs follows vLLM's StructuredOutputsParams: exactly one of json,
// regex, choice, grammar, json_object, structural_tag; disable_any_whitespace for the JSON kinds.
std::optional<StructuredOutput> parse_structured_output(const json& body) {
  std::optional<StructuredOutput> out = parse_response_format(body);
  json legacy;
  const json* so = structured_outputs_field(body, legacy);
  if (!so) return out;
  if (!so->is_object()) wrong_type("structured_outputs", "an object", *so);
  std::vector<GrammarSpec> specs = structured_output_specs(*so);
  // As vLLM: a response_format constraint goes into structured_outputs, whose options then
  // apply to it; a second constraint kind there is an error.
  if (out && !specs.empty())
    bad_request(
        "'structured_outputs' and a 'response_format' other than text cannot both "
        "give a constraint",
        "structured_outputs");
  if (!out && specs.size() != 1)
    bad_request(fmt::format("'structured_outputs' needs exactly one of json, regex, choice, "
                            "grammar, json_object, structural_tag; got {}",
                            specs.size()),
                "structured_outputs");
  if (!out) out = StructuredOutput{std::move(specs[0]), "structured_outputs"};
  if (const json* ws = field(*so, "disable_any_whitespace")) {
    if (!ws->is_boolean()) wrong_type("structured_outputs.disable_any_whitespace", "a boolean", *ws);
    out->spec.any_whitespace = !ws->get<bool>();
  }
  return out;
}

// vLLM's prompt_logprobs: an integer in [0, 20]; not with stream (the prompt's entries come in
// one piece, at the end of the prefill).
std::optional<int> parse_prompt_logprobs(const json& body, bool stream) {
  auto k = get_int_in(body, "prompt_logprobs", 0, 20, "in [0, 20]");
  if (k && stream) bad_request("'prompt_logprobs' is not supported with 'stream'", "prompt_logprobs", "unsupported");
  return k;
}

// best_of (completions): as vLLM's V1 engine, which validates it against n (the OpenAI rule) and
// then refuses any value above 1, since it generates no candidates to rank.
void check_best_of(const json& body, int n) {
  auto best_of = get_int_in(body, "best_of", 1, 128, "in [1, 128]");
  if (!best_of) return;
  if (*best_of < n)
    bad_request(fmt::format("'best_of' must be >= 'n', got best_of {} and n {}", *best_of, n), "best_of");
  if (*best_of > 1)
    bad_request(
        fmt::format("'best_of' {} is not supported (only 1: no candidates are generated to rank; use 'n')", *best_of),
        "best_of", "unsupported");
}

}  // namespace

CompletionRequest parse_completion_request(const json& body, const ModelLimits& lim) {
  CompletionRequest r;
  r.model = get_string(body, "model").value_or("");
  const json* prompt = field(body, "prompt");
  if (!prompt) bad_request("'prompt' is required", "prompt", "missing_field");
  const char* kPromptTypes =
      "a string, a list of strings, a list of token ids or a list of lists "
      "of token ids";
  auto ids_of = [&](const json& arr) {
    PromptInput in;
    in.is_text = false;
    for (const auto& v : arr) in.ids.push_back(token_id(v, "prompt", lim.n_vocab));
    if (in.ids.empty()) bad_request("'prompt' token lists must not be empty", "prompt");
    return in;
  };
  if (prompt->is_string()) {
    r.prompts.push_back({true, prompt->get<std::string>(), {}});
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad_request("'prompt' must not be an empty list", "prompt");
    const json& first = (*prompt)[0];
    if (first.is_string()) {
      for (const auto& s : *prompt) {
        if (!s.is_string()) wrong_type("prompt", kPromptTypes, *prompt);
        r.prompts.push_back({true, s.get<std::string>(), {}});
      }
    } else if (first.is_array()) {
      for (const auto& a : *prompt) {
        if (!a.is_array()) wrong_type("prompt", kPromptTypes, *prompt);
        r.prompts.push_back(ids_of(a));
      }
    } else if (first.is_number()) {
      r.prompts.push_back(ids_of(*prompt));
    } else {
      wrong_type("prompt", kPromptTypes, *prompt);
    }
  } else {
    wrong_type("prompt", kPromptTypes, *prompt);
  }
  if (field(body, "suffix")) bad_request("'suffix' is not supported", "suffix", "unsupported");
  parse_sampling(body, lim, r.params);
  check_best_of(body, r.params.n);
  r.structured = parse_structured_output(body);
  if (auto lp = get_int_in(body, "logprobs", 0, 20, "in [0, 20]")) r.params.logprobs = *lp;
  r.echo = get_bool(body, "echo").value_or(false);
  auto max_tokens = get_int_in(body, "max_tokens", 0, std::numeric_limits<int32_t>::max(), ">= 0");
  if (max_tokens == 0 && !r.echo)
    bad_request("'max_tokens' must be >= 1 (0 only with 'echo', to score the prompt), got 0", "max_tokens");
  check_max_tokens(r.params, max_tokens, "max_tokens");
  parse_stream(body, r.stream, r.include_usage);
  r.prompt_logprobs = parse_prompt_logprobs(body, r.stream);
  // The engine computes the prompt's logprobs once, for both uses (each takes its own top-k).
  if (r.echo && r.params.logprobs) r.params.prompt_logprobs = *r.params.logprobs;
  if (r.prompt_logprobs) r.params.prompt_logprobs = std::max(r.params.prompt_logprobs.value_or(0), *r.prompt_logprobs);
  r.user = get_string(body, "user").value_or("");
  return r;
}

ChatRequest parse_chat_request(const json& body, const ModelLimits& lim) {
  ChatRequest r;
  r.model = get_string(body, "model").value_or("");
  r.messages = normalize_messages(body);
  parse_chat_options(body, r.tools, r.chat_template_kwargs, r.add_generation_prompt, r.continue_final_message);
  parse_sampling(body, lim, r.params);
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  auto top = get_int_in(body, "top_logprobs", 0, 20, "in [0, 20]");
  if (top && !r.logprobs) bad_request("'top_logprobs' needs 'logprobs' to be true", "top_logprobs");
  if (r.logprobs) r.params.logprobs = top.value_or(0);
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  auto mct = get_int_in(body, "max_completion_tokens", 1, kMax, ">= 1");
  auto mt = get_int_in(body, "max_tokens", 1, kMax, ">= 1");
  r.max_tokens = mct ? mct : mt;
  // min_tokens vs max_tokens is checked once the default max_tokens is known.
  if (r.max_tokens) check_max_tokens(r.params, r.max_tokens, mct ? "max_completion_tokens" : "max_tokens");
  r.structured = parse_structured_output(body);
  parse_stream(body, r.stream, r.include_usage);
  r.prompt_logprobs = r.params.prompt_logprobs = parse_prompt_logprobs(body, r.stream);
  r.user = get_string(body, "user").value_or("");
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  TokenizeRequest r;
  r.model = get_string(body, "model").value_or("");
  const bool has_prompt = field(body, "prompt") != nullptr;
  const bool has_messages = field(body, "messages") != nullptr;
  if (has_prompt == has_messages)
    bad_request("give exactly one of 'prompt' and 'messages'", has_prompt ? "messages" : "prompt", "missing_field");
  if (has_prompt) {
    r.prompt = *get_string(body, "prompt");
    r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(true);
  } else {
    r.is_chat = true;
    r.messages = normalize_messages(body);
    parse_chat_options(body, r.tools, r.chat_template_kwargs, r.add_generation_prompt, r.continue_final_message);
    r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(false);
  }
  return r;
}

std::vector<int32_t> parse_detokenize_request(const json& body, const ModelLimits& lim, std::string* model) {
  if (model) *model = get_string(body, "model").value_or("");
  const json* toks = field(body, "tokens");
  if (!toks) bad_request("'tokens' is required", "tokens", "missing_field");
  if (!toks->is_array()) wrong_type("tokens", "a list of token ids", *toks);
  std::vector<int32_t> ids;
  for (const auto& v : *toks) ids.push_back(token_id(v, "tokens", lim.n_vocab));
  return ids;
}

// ---------------------------------------------------------------------------------------------

json finish_reason_json(const std::optional<FinishReason>& r) {
  if (!r) return nullptr;
  return std::string(to_string(*r));
}

json stop_reason_json(const std::variant<std::monostate, std::string, int32_t>& r) {
  if (auto* s = std::get_if<std::string>(&r)) return *s;
  if (auto* t = std::get_if<int32_t>(&r)) return *t;
  return nullptr;
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

// JSON has no -inf: a token the model gives probability 0 reports this (as vLLM does).
double finite_logprob(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

json bytes_json(std::string_view b) {
  json a = json::array();
  for (unsigned char c : b) a.push_back(static_cast<int>(c));
  return a;
}

}  // namespace

void append_completion_logprobs(json& into, const std::vector<SampleLogprobs>& lps, const TokenTextFn& token_text,
                                int64_t& offset) {
  if (into.is_null())
    into = {{"text_offset", json::array()},
            {"token_logprobs", json::array()},
            {"tokens", json::array()},
            {"top_logprobs", json::array()}};
  for (const auto& lp : lps) {
    TokenText t = token_text(lp.sampled.token);
    into["tokens"].push_back(t.text);
    into["token_logprobs"].push_back(finite_logprob(lp.sampled.logprob));
    into["text_offset"].push_back(offset);
    offset += utf8_length(t.text);
    json top = json::object();
    for (const auto& e : lp.top) top[token_text(e.token).text] = finite_logprob(e.logprob);
    into["top_logprobs"].push_back(std::move(top));
  }
}

json prompt_logprobs_json(std::span<const int32_t> prompt, const std::vector<SampleLogprobs>& lps, int k,
                          const TokenTextFn& token_text) {
  json out = json::array({nullptr});
  for (size_t i = 0; i < lps.size() && i + 1 < prompt.size(); ++i) {
    const SampleLogprobs& lp = lps[i];
    json entry = json::object();
    auto add = [&](int32_t token, float logprob, int rank) {
      entry[std::to_string(token)] = {
          {"logprob", finite_logprob(logprob)}, {"rank", rank}, {"decoded_token", token_text(token).text}};
    };
    for (size_t j = 0; j < lp.top.size() && static_cast<int>(j) < k; ++j)
      add(lp.top[j].token, lp.top[j].logprob, static_cast<int>(j) + 1);
    add(lp.sampled.token, lp.sampled.logprob, lp.rank);
    out.push_back(std::move(entry));
  }
  return out;
}

void append_prompt_completion_logprobs(json& into, std::span<const int32_t> prompt,
                                       const std::vector<SampleLogprobs>& lps, int k, const TokenTextFn& token_text) {
  if (into.is_null())
    into = {{"text_offset", json::array()},
            {"token_logprobs", json::array()},
            {"tokens", json::array()},
            {"top_logprobs", json::array()}};
  int64_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string text = token_text(prompt[i]).text;
    into["tokens"].push_back(text);
    into["text_offset"].push_back(offset);
    offset += utf8_length(text);
    if (i == 0 || i > lps.size()) {
      into["token_logprobs"].push_back(nullptr);
      into["top_logprobs"].push_back(nullptr);
      continue;
    }
    const SampleLogprobs& lp = lps[i - 1];
    into["token_logprobs"].push_back(finite_logprob(lp.sampled.logprob));
    json top = json::object();
    for (size_t j = 0; j < lp.top.size() && static_cast<int>(j) < k; ++j)
      top[token_text(lp.top[j].token).text] = finite_logprob(lp.top[j].logprob);
    into["top_logprobs"].push_back(std::move(top));
  }
}

void append_chat_logprobs(json& into, const std::vector<SampleLogprobs>& lps, const TokenTextFn& token_text) {
  if (into.is_null()) into = {{"content", json::array()}, {"refusal", nullptr}};
  for (const auto& lp : lps) {
    TokenText t = token_text(lp.sampled.token);
    json top = json::array();
    for (const auto& e : lp.top) {
      TokenText et = token_text(e.token);
      top.push_back({{"token", et.text}, {"logprob", finite_logprob(e.logprob)}, {"bytes", bytes_json(et.bytes)}});
    }
    into["content"].push_back({{"token", t.text},
                               {"logprob", finite_logprob(lp.sampled.logprob)},
                               {"bytes", bytes_json(t.bytes)},
                               {"top_logprobs", std::move(top)}});
  }
}

}  // namespace mla::server
