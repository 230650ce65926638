#pragma once
// The JSON type of the server: objects keep the order their keys were written in. A request's
// order matters downstream: chat templates print `tools` (and tool-call arguments) with tojson,
// which must list keys as the client sent them (as jinja2 in transformers and vLLM do), and a JSON
// schema's property order is the order constrained output follows (OpenAI strict mode,
// xgrammar). nlohmann::json would sort every object's keys.
#include <nlohmann/json.hpp>

namespace mla::server {

using json = nlohmann::ordered_json;

}  // namespace mla::server
