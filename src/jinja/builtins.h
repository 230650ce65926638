#pragma once
// Built-in filters, tests, global functions and Python methods of str/dict/list, looked up by
// name. Filters and tests take the subject plus Python-style arguments; each binds its
// arguments like the jinja2 function it mirrors (same parameter names and defaults).
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace mla::jinja {

using FilterFn = Value (*)(Interpreter& in, const Value& subject, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& subject, CallArgs& args);

// nullptr if jinja2 has no filter/test of that name. A filter jinja2 has but mla.cpp does not
// implement is found and raises a clear error when applied.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The bound method obj.name for str, dict, list/tuple, or nullopt when the type has no such
// attribute. Mutating list/dict methods come back as undefined values that raise jinja2's
// sandbox SecurityError when called, as in ImmutableSandboxedEnvironment.
std::optional<Value> find_method(const Value& obj, const std::string& name);

// Python's printf-style `fmt % args` (also the `format` filter).
std::string percent_format(const std::string& fmt, const Value& args);

// Binds Python-style call arguments to named parameters (name, default). A parameter without a
// default is required. Throws the TypeError Python would raise for missing/unknown/extra args.
struct Param {
  const char* name;
  std::optional<Value> default_value;
};
std::vector<Value> bind_args(std::string_view fn_name, CallArgs& args, std::initializer_list<Param> params);

}  // namespace mla::jinja
