// GgufValue: typed views, rendering and constructors.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "gguf/gguf.h"
#include "util/error.h"

namespace mla {

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
      return "UINT8";
    case GgufValueType::INT8:
      return "INT8";
    case GgufValueType::UINT16:
      return "UINT16";
    case GgufValueType::INT16:
      return "INT16";
    case GgufValueType::UINT32:
      return "UINT32";
    case GgufValueType::INT32:
      return "INT32";
    case GgufValueType::FLOAT32:
      return "FLOAT32";
    case GgufValueType::BOOL:
      return "BOOL";
    case GgufValueType::STRING:
      return "STRING";
    case GgufValueType::ARRAY:
      return "ARRAY";
    case GgufValueType::UINT64:
      return "UINT64";
    case GgufValueType::INT64:
      return "INT64";
    case GgufValueType::FLOAT64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

bool GgufValue::is_integer() const {
  switch (type()) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const { return type() == GgufValueType::FLOAT32 || type() == GgufValueType::FLOAT64; }

int64_t GgufValue::as_int() const {
  return std::visit(
      [this](const auto& x) -> int64_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, std::string> || std::is_same_v<T, GgufArray>) {
          fail("expected an integer, got {}", gguf_value_type_name(type()));
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail("integer {} does not fit in int64", x);
          return static_cast<int64_t>(x);
        } else {
          return static_cast<int64_t>(x);
        }
      },
      v);
}

uint64_t GgufValue::as_uint() const {
  if (type() == GgufValueType::UINT64) return std::get<uint64_t>(v);
  int64_t x = as_int();
  if (x < 0) fail("expected a non-negative integer, got {}", x);
  return static_cast<uint64_t>(x);
}

double GgufValue::as_float() const {
  if (type() == GgufValueType::FLOAT32) return std::get<float>(v);
  if (type() == GgufValueType::FLOAT64) return std::get<double>(v);
  if (is_integer()) return static_cast<double>(as_int());
  fail("expected a float, got {}", gguf_value_type_name(type()));
}

bool GgufValue::as_bool() const {
  if (type() != GgufValueType::BOOL) fail("expected BOOL, got {}", gguf_value_type_name(type()));
  return std::get<bool>(v);
}

const std::string& GgufValue::as_string() const {
  if (type() != GgufValueType::STRING) fail("expected STRING, got {}", gguf_value_type_name(type()));
  return std::get<std::string>(v);
}

const GgufArray& GgufValue::as_array() const {
  if (type() != GgufValueType::ARRAY) fail("expected ARRAY, got {}", gguf_value_type_name(type()));
  return std::get<GgufArray>(v);
}

namespace {

std::string quote(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ >= max_chars) {
      out += "...";
      break;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20)
          out += fmt::format("\\x{:02x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string GgufValue::to_string(size_t max_items) const {
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return quote(x, max_items == SIZE_MAX ? SIZE_MAX : 160);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          std::string out = "[";
          size_t shown = std::min(max_items, x.items.size());
          for (size_t i = 0; i < shown; ++i) {
            if (i) out += ", ";
            out += x.items[i].to_string(max_items);
          }
          if (shown < x.items.size()) out += fmt::format(", ... ({} items)", x.items.size());
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, uint64_t>) {
          return fmt::format("{}", x);
        } else {
          return fmt::format("{}", static_cast<int64_t>(x));
        }
      },
      v);
}

GgufValue GgufValue::strings(const std::vector<std::string>& xs) {
  std::vector<GgufValue> items;
  items.reserve(xs.size());
  for (const auto& s : xs) items.push_back(str(s));
  return array(GgufValueType::STRING, std::move(items));
}

GgufValue GgufValue::f32s(const std::vector<float>& xs) {
  std::vector<GgufValue> items;
  items.reserve(xs.size());
  for (float x : xs) items.push_back(f32(x));
  return array(GgufValueType::FLOAT32, std::move(items));
}

GgufValue GgufValue::i32s(const std::vector<int32_t>& xs) {
  std::vector<GgufValue> items;
  items.reserve(xs.size());
  for (int32_t x : xs) items.push_back(i32(x));
  return array(GgufValueType::INT32, std::move(items));
}

}  // namespace mla
