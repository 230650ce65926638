#pragma once
// Python's format(value, spec): the format-spec mini-language used by str.format().
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace mla::jinja {

std::string format_value(const Value& v, std::string_view spec);

}  // namespace mla::jinja
