#pragma once
// The JSON type of the server: objects keep the order their keys were written in. A request's
// order matters downstream: chat templates print `tools` (and tool-call arguments) with tojson,
// which must list keys as the client sent them (as jinja2 in transformers and vLLM do), and a JSON
// schema's property order is the order constrained output follows (OpenAI strict mode,
// xgrammar). nlohmann::json would sort every object's keys.
#include <nlohmann/json.hpp>

namespace mla::server {

using json = nlohmann::ordered_json;

// A request object's field when present and not null, else nullptr (the protocols treat an
// explicit null as absent, as the OpenAI and Anthropic APIs do).
inline const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace mla::server
