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

// A parsed format spec: [[fill]align][sign][#][0][width][grouping][.precision][type].
struct FormatSpec {
  std::optional<char32_t> fill;
  char align = 0;
  char sign = 0;
  bool alternate = false;
  size_t width = 0;
  char grouping = 0;
  std::optional<int> precision;
  char type = 0;
};

FormatSpec parse_format_spec(std::string_view spec) {
  FormatSpec f;
  std::u32string s = py::decode(spec);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    f.fill = s[0];
    f.align = static_cast<char>(s[1]);
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    f.align = static_cast<char>(s[0]);
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f.sign = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '#') {
    f.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (!f.fill) f.fill = U'0';
    if (!f.align) f.align = '=';
    ++i;
  }
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') f.width = f.width * 10 + (s[i++] - '0');
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) f.grouping = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '.') {
    ++i;
    int p = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      p = p * 10 + static_cast<int>(s[i++] - '0');
      any = true;
    }
    if (!any) throw Error("Format specifier missing precision");
    f.precision = p;
  }
  if (i < s.size()) f.type = static_cast<char>(s[i++]);
  if (i != s.size()) throw Error("Invalid format specifier");
  return f;
}

// An integer's digits for types b c d o x X n (none), its sign and base prefix in prefix.
std::string format_int_body(int64_t x, const FormatSpec& f, std::string& prefix) {
  if (f.precision) throw Error("Precision not allowed in integer format specifier");
  uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  if (x < 0) prefix = "-";
  std::string body;
  switch (f.type) {
    case 'b':
      body = fmt::format("{:b}", mag);
      if (f.alternate) prefix += "0b";
      break;
    case 'o':
      body = fmt::format("{:o}", mag);
      if (f.alternate) prefix += "0o";
      break;
    case 'x':
      body = fmt::format("{:x}", mag);
      if (f.alternate) prefix += "0x";
      break;
    case 'X':
      body = fmt::format("{:X}", mag);
      if (f.alternate) prefix += "0X";
      break;
    case 'c':
      py::append_utf8(body, static_cast<char32_t>(x));
      prefix.clear();
      break;
    default:
      body = std::to_string(mag);
  }
  if (f.grouping)
    body = group_digits(body, f.grouping, (f.type == 'b' || f.type == 'o' || f.type == 'x' || f.type == 'X') ? 4 : 3);
  return body;
}

// A number as a float (types e E f F g G n % and none), its sign in prefix.
std::string format_float_body(const Value& v, const FormatSpec& f, std::string& prefix) {
  if (f.type != 0 && std::string_view("eEfFgGn%").find(f.type) == std::string_view::npos)
    throw Error(fmt::format("Unknown format code '{}' for object of type '{}'", f.type, v.type_name()));
  double x = v.as_double();
  std::string t = format_float(std::fabs(x), f.type == 'n' ? 'g' : f.type, f.precision, f.alternate);
  if (std::signbit(x) && !std::isnan(x)) prefix = "-";
  if (f.grouping) {
    size_t end = t.find_first_not_of("0123456789");
    if (end == std::string::npos) end = t.size();
    t = group_digits(t.substr(0, end), f.grouping, 3) + t.substr(end);
  }
  return t;
}

// prefix + body padded to the spec's width with its fill and alignment.
std::string pad_to_width(const std::string& prefix, const std::string& body, const FormatSpec& f) {
  std::string fill_s;
  py::append_utf8(fill_s, f.fill.value_or(U' '));
  size_t len = py::length(prefix) + py::length(body);
  if (f.width <= len) return prefix + body;
  size_t pad = f.width - len;
  auto repeat = [&](size_t n) {
    std::string out;
    for (size_t k = 0; k < n; ++k) out += fill_s;
    return out;
  };
  switch (f.align) {
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

}  // namespace

std::string format_value(const Value& v, std::string_view spec) {
  if (v.is_undefined()) v.throw_undefined();
  FormatSpec f = parse_format_spec(spec);
  std::string body, prefix;
  const bool numeric = v.is_number();
  if (v.is_string() || (!numeric && (f.type == 0 || f.type == 's'))) {
    if (f.type != 0 && f.type != 's')
      throw Error(fmt::format("Unknown format code '{}' for object of type '{}'", f.type, v.type_name()));
    if (!v.is_string() && !spec.empty() && !numeric)
      throw Error(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
    if (f.sign) throw Error("Sign not allowed in string format specifier");
    if (f.align == '=') throw Error("'=' alignment not allowed in string format specifier");
    std::u32string text = py::decode(v.str());
    if (f.precision && text.size() > static_cast<size_t>(*f.precision)) text.resize(static_cast<size_t>(*f.precision));
    body = py::encode(text);
    if (!f.align) f.align = '<';
  } else if (numeric) {
    const bool as_int =
        v.is_integral() && (f.type == 0 || std::string_view("bcdoxXn").find(f.type) != std::string_view::npos);
    if (v.is_bool() && f.type == 0) {
      body = v.as_bool() ? "True" : "False";
      if (!f.align) f.align = '<';
    } else {
      body = as_int ? format_int_body(v.as_int(), f, prefix) : format_float_body(v, f, prefix);
    }
    if (prefix.empty() || prefix[0] != '-') {
      if (f.sign == '+') prefix = "+" + prefix;
      if (f.sign == ' ') prefix = " " + prefix;
    }
    if (!f.align) f.align = '>';
  } else {
    throw Error(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
  }
  return pad_to_width(prefix, body, f);
}

namespace {

// One printf-style conversion's flags, width and precision, as written.
struct PercentSpec {
  char align = 0;  // '<' for '-'
  bool zero = false;
  char sign = 0;
  bool alternate = false;
  std::string width, precision;
  bool has_precision = false;

  // The str.format spec of the same conversion with type (0: none).
  std::string format_spec(char type) const {
    std::string sp;
    if (align) sp += align;
    if (sign) sp += sign;
    if (alternate) sp += '#';
    if (zero) sp += '0';
    sp += width;
    if (has_precision) {
      sp += '.';
      sp += precision.empty() ? std::string("0") : precision;
    }
    if (type) sp += type;
    return sp;
  }
};

// Value v converted by %conv under spec.
std::string percent_convert(char conv, const Value& v, PercentSpec spec) {
  switch (conv) {
    case 's':
    case 'r':
    case 'a': {
      std::string sp(1, spec.align ? spec.align : '>');
      sp += spec.width;
      if (spec.has_precision) {
        sp += '.';
        sp += spec.precision.empty() ? std::string("0") : spec.precision;
      }
      return format_value(Value::string(conv == 's' ? v.str() : v.repr()), sp);
    }
    case 'd':
    case 'i':
    case 'u': {
      if (!v.is_number())
        throw Error(fmt::format("%{} format: a real number is required, not {}", conv, v.type_name()));
      Value iv =
          v.is_float() ? Value::integer(static_cast<int64_t>(std::trunc(v.as_double()))) : Value::integer(v.as_int());
      spec.has_precision = false;
      return format_value(iv, spec.format_spec('d'));
    }
    case 'x':
    case 'X':
    case 'o':
      if (!v.is_integral()) throw Error(fmt::format("%{} format: an integer is required, not {}", conv, v.type_name()));
      spec.has_precision = false;
      return format_value(Value::integer(v.as_int()), spec.format_spec(conv));
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      if (!v.is_number()) throw Error(fmt::format("must be real number, not {}", v.type_name()));
      if (!spec.has_precision) {
        spec.has_precision = true;
        spec.precision = "6";
      }
      return format_value(Value::floating(v.as_double()), spec.format_spec(conv));
    case 'c': {
      std::string c = v.is_string() ? v.as_string() : "";
      if (v.is_integral()) py::append_utf8(c, static_cast<char32_t>(v.as_int()));
      return format_value(Value::string(c), std::string(spec.align ? "<" : "") + spec.width);
    }
    default:
      throw Error(fmt::format("unsupported format character '{}'", conv));
  }
}

// The right operand of %: positional arguments, or a mapping for %(key)s.
struct PercentArgs {
  const Value& args;
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  size_t next = 0;

  explicit PercentArgs(const Value& a) : args(a) {
    if (a.is_seq(SeqKind::SeqKind_tuple))
      positional = a.seq_data().items;
    else if (a.is_dict())
      mapping = &a.dict_data();
    else
      positional.push_back(a);
  }
  Value take() {
    if (next >= positional.size()) throw Error("not enough arguments for format string");
    return positional[next++];
  }
};

// Flags, width ('*' takes an argument), precision and length modifiers from f[i]; i ends on the
// conversion character.
PercentSpec parse_percent_spec(const std::u32string& f, size_t& i, PercentArgs& args) {
  std::string flags;
  while (i < f.size() && std::u32string_view(U"-+ #0").find(f[i]) != std::u32string_view::npos)
    flags.push_back(static_cast<char>(f[i++]));
  PercentSpec spec;
  if (i < f.size() && f[i] == '*') {
    spec.width = args.take().str();
    ++i;
  }
  while (i < f.size() && f[i] >= '0' && f[i] <= '9') spec.width.push_back(static_cast<char>(f[i++]));
  if (i < f.size() && f[i] == '.') {
    spec.has_precision = true;
    ++i;
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') spec.precision.push_back(static_cast<char>(f[i++]));
  }
  while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
  if (i >= f.size()) throw Error("incomplete format");
  spec.align = flags.find('-') != std::string::npos ? '<' : 0;
  spec.zero = flags.find('0') != std::string::npos && !spec.align;
  spec.sign = flags.find('+') != std::string::npos ? '+' : flags.find(' ') != std::string::npos ? ' ' : 0;
  spec.alternate = flags.find('#') != std::string::npos;
  return spec;
}

}  // namespace

std::string percent_format(const std::string& fmt_s, const Value& args) {
  PercentArgs in(args);
  // Python skips the "not all arguments converted" check for subscriptable right operands
  // (PyMapping_Check): dicts, lists, ranges and jinja2's Undefined.
  const bool mapping_like = args.is_dict() || args.is_seq(SeqKind::SeqKind_list) ||
                            args.is_seq(SeqKind::SeqKind_range) || args.is_undefined();
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
      if (!in.mapping) throw Error("format requires a mapping");
      size_t close = f.find(U')', i);
      if (close == std::u32string::npos) throw Error("incomplete format key");
      std::string key = py::encode(f.substr(i + 1, close - i - 1));
      const Value* v = in.mapping->get(key);
      if (!v) throw Error(fmt::format("KeyError: {}", py::repr(key)));
      arg = *v;
      i = close + 1;
    }
    const PercentSpec spec = parse_percent_spec(f, i, in);
    const char conv = static_cast<char>(f[i]);
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    Value v = arg ? *arg : (in.mapping ? args : in.take());
    if (v.is_undefined() && conv != 's') v.throw_undefined();
    out += percent_convert(conv, v, spec);
  }
  if (!mapping_like && in.next < in.positional.size())
    throw Error("not all arguments converted during string formatting");
  return out;
}

}  // namespace mla::jinja
