// Python string formatting: printf-style `fmt % args` and str.format() with the format-spec
// mini-language ([[fill]align][sign][#][0][width][,|_][.precision][type]).
#include "jinja/format.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "jinja/builtins.h"
#include "jinja/pystr.h"

namespace mla::jinja {
namespace {

std::string c_format(const char* spec, double x) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec, x);
  if (n < 0 || n >= static_cast<int>(sizeof buf)) throw Error("formatted number is too long");
  return std::string(buf, static_cast<size_t>(n));
}

std::string c_format_prec(char type, int precision, double x) {
  std::string spec = fmt::format("%.{}{}", precision, type);
  return c_format(spec.c_str(), x);
}

// Python's float formatting for types e E f F g G % and none (with a precision).
std::string format_float(double x, char type, std::optional<int> precision, bool alternate) {
  if (std::isnan(x) || std::isinf(x)) {
    std::string s = std::isnan(x) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G') s = py::upper(s);
    return s;
  }
  switch (type) {
    case 'e':
    case 'E':
    case 'f':
    case 'F':
      return c_format_prec(type, precision.value_or(6), x);
    case '%':
      return c_format_prec('f', precision.value_or(6), x * 100) + "%";
    case 'g':
    case 'G': {
      std::string spec = fmt::format("%{}.{}{}", alternate ? "#" : "", precision.value_or(6), type);
      return c_format(spec.c_str(), x);
    }
    default: {
      if (!precision) return py::float_repr(x);
      // like 'g', but fixed notation keeps at least one digit after the point
      std::string s = c_format_prec('g', *precision == 0 ? 1 : *precision, x);
      if (s.find_first_of(".e") == std::string::npos && s.find("inf") == std::string::npos) s += ".0";
      return s;
    }
  }
}

std::string group_digits(const std::string& digits, char sep, size_t every) {
  std::string out;
  size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % every == 0) out.push_back(sep);
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace

std::string format_value(const Value& v, std::string_view spec) {
  if (v.is_undefined()) v.throw_undefined();
  // Parse [[fill]align][sign][#][0][width][grouping][.precision][type]
  std::u32string s = py::decode(spec);
  size_t i = 0;
  std::optional<char32_t> fill;
  char align = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    fill = s[0];
    align = static_cast<char>(s[1]);
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    align = static_cast<char>(s[0]);
    i = 1;
  }
  char sign = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sign = static_cast<char>(s[i++]);
  bool alternate = false;
  if (i < s.size() && s[i] == '#') {
    alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (!fill) fill = U'0';
    if (!align) align = '=';
    ++i;
  }
  size_t width = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') width = width * 10 + (s[i++] - '0');
  char grouping = 0;
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) grouping = static_cast<char>(s[i++]);
  std::optional<int> precision;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int p = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      p = p * 10 + static_cast<int>(s[i++] - '0');
      any = true;
    }
    if (!any) throw Error("Format specifier missing precision");
    precision = p;
  }
  char type = 0;
  if (i < s.size()) type = static_cast<char>(s[i++]);
  if (i != s.size()) throw Error("Invalid format specifier");

  std::string body, prefix;
  bool numeric = v.is_number();
  if (v.is_string() || (!numeric && (type == 0 || type == 's'))) {
    if (type != 0 && type != 's')
      throw Error(fmt::format("Unknown format code '{}' for object of type '{}'", type, v.type_name()));
    if (!v.is_string() && !spec.empty() && !numeric)
      throw Error(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
    if (sign) throw Error("Sign not allowed in string format specifier");
    if (align == '=') throw Error("'=' alignment not allowed in string format specifier");
    std::u32string text = py::decode(v.str());
    if (precision && text.size() > static_cast<size_t>(*precision)) text.resize(static_cast<size_t>(*precision));
    body = py::encode(text);
    if (!align) align = '<';
  } else if (numeric) {
    bool as_int = v.is_integral() && (type == 0 || std::string_view("bcdoxXn").find(type) != std::string_view::npos);
    if (v.is_bool() && type == 0) {
      body = v.as_bool() ? "True" : "False";
      numeric = false;
      if (!align) align = '<';
    } else if (as_int) {
      if (precision) throw Error("Precision not allowed in integer format specifier");
      int64_t x = v.as_int();
      uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
      if (x < 0) prefix = "-";
      switch (type) {
        case 'b':
          body = fmt::format("{:b}", mag);
          if (alternate) prefix += "0b";
          break;
        case 'o':
          body = fmt::format("{:o}", mag);
          if (alternate) prefix += "0o";
          break;
        case 'x':
          body = fmt::format("{:x}", mag);
          if (alternate) prefix += "0x";
          break;
        case 'X':
          body = fmt::format("{:X}", mag);
          if (alternate) prefix += "0X";
          break;
        case 'c': {
          std::string c;
          py::append_utf8(c, static_cast<char32_t>(x));
          body = c;
          prefix.clear();
          break;
        }
        default:
          body = std::to_string(mag);
      }
      if (grouping)
        body = group_digits(body, grouping, (type == 'b' || type == 'o' || type == 'x' || type == 'X') ? 4 : 3);
    } else {
      if (v.is_integral() || v.is_float()) {
        if (type != 0 && std::string_view("eEfFgGn%").find(type) == std::string_view::npos)
          throw Error(fmt::format("Unknown format code '{}' for object of type '{}'", type, v.type_name()));
      }
      double x = v.as_double();
      std::string t = format_float(std::fabs(x), type == 'n' ? 'g' : type, precision, alternate);
      if (std::signbit(x) && !std::isnan(x)) prefix = "-";
      if (grouping) {
        size_t end = t.find_first_not_of("0123456789");
        if (end == std::string::npos) end = t.size();
        t = group_digits(t.substr(0, end), grouping, 3) + t.substr(end);
      }
      body = t;
    }
    if (prefix.empty() || prefix[0] != '-') {
      if (sign == '+') prefix = "+" + prefix;
      if (sign == ' ') prefix = " " + prefix;
    }
    if (!align) align = '>';
  } else {
    throw Error(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
  }
  std::string fill_s;
  py::append_utf8(fill_s, fill.value_or(U' '));
  size_t len = py::length(prefix) + py::length(body);
  if (width <= len) return prefix + body;
  size_t pad = width - len;
  auto repeat = [&](size_t n) {
    std::string out;
    for (size_t k = 0; k < n; ++k) out += fill_s;
    return out;
  };
  switch (align) {
    case '<':
      return prefix + body + repeat(pad);
    case '^':
      return repeat(pad / 2) + prefix + body + repeat(pad - pad / 2);
    case '=':
      return prefix + repeat(pad) + body;
    default:
      return repeat(pad) + prefix + body;
  }
}

std::string percent_format(const std::string& fmt_s, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  // Python skips the "not all arguments converted" check for subscriptable right operands
  // (PyMapping_Check): dicts, lists, ranges and jinja2's Undefined.
  bool mapping_like = args.is_dict() || args.is_seq(SeqKind::SeqKind_list) || args.is_seq(SeqKind::SeqKind_range) ||
                      args.is_undefined();
  if (args.is_seq(SeqKind::SeqKind_tuple))
    positional = args.seq_data().items;
  else if (args.is_dict())
    mapping = &args.dict_data();
  else
    positional.push_back(args);
  size_t next_arg = 0;
  std::string out;
  std::u32string f = py::decode(fmt_s);
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      py::append_utf8(out, f[i]);
      continue;
    }
    if (++i >= f.size()) throw Error("incomplete format");
    std::optional<Value> arg;
    if (f[i] == '(') {
      if (!mapping) throw Error("format requires a mapping");
      size_t close = f.find(U')', i);
      if (close == std::u32string::npos) throw Error("incomplete format key");
      std::string key = py::encode(f.substr(i + 1, close - i - 1));
      const Value* v = mapping->get(key);
      if (!v) throw Error(fmt::format("KeyError: {}", py::repr(key)));
      arg = *v;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::u32string_view(U"-+ #0").find(f[i]) != std::u32string_view::npos)
      flags.push_back(static_cast<char>(f[i++]));
    auto take_arg = [&]() -> Value {
      if (next_arg >= positional.size()) throw Error("not enough arguments for format string");
      return positional[next_arg++];
    };
    std::string width, precision;
    if (i < f.size() && f[i] == '*') {
      width = take_arg().str();
      ++i;
    }
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') width.push_back(static_cast<char>(f[i++]));
    bool has_precision = false;
    if (i < f.size() && f[i] == '.') {
      has_precision = true;
      ++i;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') precision.push_back(static_cast<char>(f[i++]));
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) throw Error("incomplete format");
    char conv = static_cast<char>(f[i]);
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    Value v = arg ? *arg : (mapping ? args : take_arg());
    if (v.is_undefined() && conv != 's') v.throw_undefined();
    std::string spec;
    char align = flags.find('-') != std::string::npos ? '<' : 0;
    bool zero = flags.find('0') != std::string::npos && !align;
    char sign = flags.find('+') != std::string::npos ? '+' : flags.find(' ') != std::string::npos ? ' ' : 0;
    bool alt = flags.find('#') != std::string::npos;
    auto build = [&](char type) {
      std::string sp;
      if (align) sp += align;
      if (sign) sp += sign;
      if (alt) sp += '#';
      if (zero) sp += '0';
      sp += width;
      if (has_precision) {
        sp += '.';
        sp += precision.empty() ? std::string("0") : precision;
      }
      if (type) sp += type;
      return sp;
    };
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string text = conv == 's' ? v.str() : v.repr();
        Value sv = Value::string(text);
        std::string sp(1, align ? align : '>');
        sp += width;
        if (has_precision) {
          sp += '.';
          sp += precision.empty() ? std::string("0") : precision;
        }
        out += format_value(sv, sp);
        break;
      }
      case 'd':
      case 'i':
      case 'u': {
        if (!v.is_number())
          throw Error(fmt::format("%{} format: a real number is required, not {}", conv, v.type_name()));
        Value iv =
            v.is_float() ? Value::integer(static_cast<int64_t>(std::trunc(v.as_double()))) : Value::integer(v.as_int());
        has_precision = false;
        out += format_value(iv, build('d'));
        break;
      }
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_integral())
          throw Error(fmt::format("%{} format: an integer is required, not {}", conv, v.type_name()));
        has_precision = false;
        out += format_value(Value::integer(v.as_int()), build(conv));
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!v.is_number()) throw Error(fmt::format("must be real number, not {}", v.type_name()));
        if (!has_precision) {
          has_precision = true;
          precision = "6";
        }
        out += format_value(Value::floating(v.as_double()), build(conv));
        break;
      }
      case 'c': {
        std::string c = v.is_string() ? v.as_string() : "";
        if (v.is_integral()) py::append_utf8(c, static_cast<char32_t>(v.as_int()));
        out += format_value(Value::string(c), std::string(align ? "<" : "") + width);
        break;
      }
      default:
        throw Error(fmt::format("unsupported format character '{}'", conv));
    }
  }
  if (!mapping_like && next_arg < positional.size())
    throw Error("not all arguments converted during string formatting");
  return out;
}

}  // namespace mla::jinja
