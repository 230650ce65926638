// Python methods of str, dict, list and tuple as templates call them (message.content.split(...),
// tool.get("name"), d.items()), plus argument binding for every builtin.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "jinja/builtins.h"
#include "jinja/format.h"
#include "jinja/interpreter.h"
#include "jinja/pystr.h"

namespace mla::jinja {

std::vector<Value> bind_args(std::string_view fn, CallArgs& args, std::initializer_list<Param> params) {
  std::vector<std::optional<Value>> bound(params.size());
  if (args.args.size() > params.size())
    throw Error(fmt::format("{}() takes at most {} argument(s) ({} given)", fn, params.size(), args.args.size()));
  for (size_t i = 0; i < args.args.size(); ++i) bound[i] = args.args[i];
  for (auto& [name, v] : args.kwargs) {
    size_t i = 0;
    for (const auto& p : params) {
      if (name == p.name) break;
      ++i;
    }
    if (i == params.size()) throw Error(fmt::format("{}() got an unexpected keyword argument '{}'", fn, name));
    if (bound[i]) throw Error(fmt::format("{}() got multiple values for argument '{}'", fn, name));
    bound[i] = v;
  }
  std::vector<Value> out;
  out.reserve(params.size());
  size_t i = 0;
  for (const auto& p : params) {
    if (bound[i])
      out.push_back(std::move(*bound[i]));
    else if (p.default_value)
      out.push_back(*p.default_value);
    else
      throw Error(fmt::format("{}() missing required argument '{}'", fn, p.name));
    ++i;
  }
  return out;
}

namespace {

const std::string& want_str(const Value& v, std::string_view what) {
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_string()) throw Error(fmt::format("{} must be str, not {}", what, v.type_name()));
  return v.as_string();
}

std::optional<std::string> opt_str(const Value& v, std::string_view what) {
  if (v.is_none()) return std::nullopt;
  return want_str(v, what);
}

std::optional<int64_t> opt_index(const Value& v) {
  if (v.is_none()) return std::nullopt;
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_integral()) throw Error("slice indices must be integers or None or have an __index__ method");
  return v.as_int();
}

int64_t want_int(const Value& v, std::string_view what) {
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_integral())
    throw Error(fmt::format("{}: '{}' object cannot be interpreted as an integer", what, v.type_name()));
  return v.as_int();
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

using Method = std::function<Value(Interpreter&, CallArgs&)>;

Value bound(const std::string& type, const std::string& name, Method m) {
  return Value::function(fmt::format("{}.{}", type, name), "builtin_function_or_method", std::move(m));
}

// The value a str.format replacement field names: {} (the next positional argument), {0}, {name},
// then any .attr and [key] steps.
struct FieldNumbering {
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
};

Value field_value(Interpreter& in, const std::string& field, CallArgs& a, FieldNumbering& n) {
  size_t end = field.find_first_of(".[");
  std::string head = field.substr(0, end);
  Value v;
  if (head.empty()) {
    if (n.used_manual) throw Error("cannot switch from manual field specification to automatic field numbering");
    n.used_auto = true;
    if (n.auto_index >= a.args.size())
      throw Error(fmt::format("Replacement index {} out of range for positional args tuple", n.auto_index));
    v = a.args[n.auto_index++];
  } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    if (n.used_auto) throw Error("cannot switch from automatic field numbering to manual field specification");
    n.used_manual = true;
    auto k = static_cast<size_t>(py::digits_value(head));
    if (k >= a.args.size()) throw Error(fmt::format("Replacement index {} out of range for positional args tuple", k));
    v = a.args[k];
  } else {
    auto it = std::find_if(a.kwargs.begin(), a.kwargs.end(), [&](const auto& kv) { return kv.first == head; });
    if (it == a.kwargs.end()) throw Error(fmt::format("KeyError: '{}'", head));
    v = it->second;
  }
  while (end != std::string::npos && end < field.size()) {
    if (field[end] == '.') {
      size_t next = field.find_first_of(".[", end + 1);
      v = in.getattr(v, field.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1));
      end = next;
    } else {
      size_t rb = field.find(']', end);
      if (rb == std::string::npos) throw Error("Missing ']' in format string");
      std::string key = field.substr(end + 1, rb - end - 1);
      bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      v = in.getitem(v, digits ? Value::integer(py::digits_value(key)) : Value::string(key));
      end = rb + 1;
    }
  }
  return v;
}

// One replacement field's text: field[!conv][:spec].
std::string replacement(Interpreter& in, std::string field, CallArgs& a, FieldNumbering& n) {
  if (field.find('{') != std::string::npos) throw Error("nested replacement fields in format specs are not supported");
  std::string spec, conv;
  if (size_t colon = field.find(':'); colon != std::string::npos) {
    spec = field.substr(colon + 1);
    field.resize(colon);
  }
  if (size_t bang = field.find('!'); bang != std::string::npos) {
    conv = field.substr(bang + 1);
    field.resize(bang);
  }
  Value v = field_value(in, field, a, n);
  if (conv == "r" || conv == "a")
    v = Value::string(v.repr());
  else if (conv == "s")
    v = Value::string(v.str());
  else if (!conv.empty())
    throw Error(fmt::format("Unknown conversion specifier {}", conv));
  return format_value(v, spec);
}

// str.format: {} {0} {name} {0.attr} {0[key]} with !r/!s/!a and a format spec.
std::string str_format(Interpreter& in, const std::string& f, CallArgs& a) {
  std::u32string s = py::decode(f);
  std::string out;
  FieldNumbering numbering;
  for (size_t i = 0; i < s.size(); ++i) {
    char32_t c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      throw Error("Single '}' encountered in format string");
    }
    if (c != '{') {
      py::append_utf8(out, c);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = s.find(U'}', i);
    if (close == std::u32string::npos) throw Error("expected '}' before end of string");
    out += replacement(in, py::encode(s.substr(i + 1, close - i - 1)), a, numbering);
    i = close;
  }
  return out;
}

bool str_predicate(const std::string& s, const std::string& name) {
  std::u32string u = py::decode(s);
  auto all = [&](auto pred) { return !u.empty() && std::all_of(u.begin(), u.end(), pred); };
  if (name == "isalnum") return all([](char32_t c) { return py::is_alpha(c) || py::is_digit(c); });
  if (name == "isalpha") return all(py::is_alpha);
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return all(py::is_digit);
  if (name == "isspace") return all(py::is_space);
  if (name == "isascii") return std::all_of(u.begin(), u.end(), [](char32_t c) { return c < 0x80; });
  if (name == "isidentifier")
    return !u.empty() && !py::is_digit(u[0]) &&
           std::all_of(u.begin(), u.end(), [](char32_t c) { return py::is_word(c); });
  bool any_cased = false, ok = true;
  if (name == "islower" || name == "isupper") {
    for (char32_t c : u) {
      bool up = py::is_cased_upper(c), lo = py::is_cased_lower(c);
      any_cased = any_cased || up || lo;
      if (name == "islower" ? up : lo) ok = false;
    }
    return any_cased && ok;
  }
  // istitle: uppercase only after uncased characters, lowercase only after cased ones
  bool prev_cased = false;
  for (char32_t c : u) {
    bool up = py::is_cased_upper(c), lo = py::is_cased_lower(c);
    if (up) {
      if (prev_cased) return false;
      prev_cased = any_cased = true;
    } else if (lo) {
      if (!prev_cased) return false;
      prev_cased = any_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return any_cased;
}

std::string pad_str(const std::string& s, int64_t width, const std::string& fill, char where) {
  int64_t n = static_cast<int64_t>(py::length(s));
  if (width <= n) return s;
  if (py::length(fill) != 1) throw Error("The fill character must be exactly one character long");
  int64_t marg = width - n;
  int64_t left = where == 'l' ? 0 : where == 'r' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

// str methods that test, convert case, strip, split or replace.
std::optional<Value> str_text_method(const std::string& s, const std::string& name) {
  auto m = [&](Method fn) { return bound("str", name, std::move(fn)); };
  static const std::set<std::string> predicates = {"isalnum",   "isalpha", "isdigit", "isdecimal",
                                                   "isnumeric", "isspace", "isascii", "isidentifier",
                                                   "islower",   "isupper", "istitle"};
  if (predicates.count(name))
    return m([s, name](Interpreter&, CallArgs& a) {
      bind_args(name, a, {});
      return Value::boolean(str_predicate(s, name));
    });
  if (name == "upper" || name == "lower" || name == "casefold" || name == "title" || name == "capitalize" ||
      name == "swapcase")
    return m([s, name](Interpreter&, CallArgs& a) {
      bind_args(name, a, {});
      if (name == "upper") return Value::string(py::upper(s));
      if (name == "lower" || name == "casefold") return Value::string(py::lower(s));
      if (name == "title") return Value::string(py::title(s));
      if (name == "capitalize") return Value::string(py::capitalize(s));
      return Value::string(py::swapcase(s));
    });
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"chars", Value::none()}});
      return Value::string(py::strip(s, opt_str(v[0], name + " arg"), name != "rstrip", name != "lstrip"));
    });
  if (name == "split" || name == "rsplit")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
      auto sep = opt_str(v[0], "sep");
      if (sep && sep->empty()) throw Error("empty separator");
      int64_t maxsplit = want_int(v[1], "maxsplit");
      return str_list(name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit));
    });
  if (name == "splitlines")
    return m([s](Interpreter&, CallArgs& a) {
      auto v = bind_args("splitlines", a, {{"keepends", Value::boolean(false)}});
      return str_list(py::splitlines(s, v[0].truthy()));
    });
  if (name == "replace")
    return m([s](Interpreter&, CallArgs& a) {
      auto v = bind_args("replace", a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::integer(-1)}});
      return Value::string(py::replace(s, want_str(v[0], "replace() argument 1"),
                                       want_str(v[1], "replace() argument 2"), want_int(v[2], "count")));
    });
  return std::nullopt;
}

// str methods that search, join, partition or remove an affix.
std::optional<Value> str_search_method(const std::string& s, const std::string& name) {
  auto m = [&](Method fn) { return bound("str", name, std::move(fn)); };
  if (name == "startswith" || name == "endswith")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"prefix", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
      std::vector<Value> options =
          v[0].is_seq(SeqKind::SeqKind_tuple) ? v[0].seq_data().items : std::vector<Value>{v[0]};
      for (const auto& o : options) {
        if (!o.is_string())
          throw Error(fmt::format("{} first arg must be str or a tuple of str, not {}", name, o.type_name()));
        if (py::startswith(s, o.as_string(), opt_index(v[1]), opt_index(v[2]), name == "endswith"))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"sub", std::nullopt}, {"start", Value::none()}, {"end", Value::none()}});
      const std::string& sub = want_str(v[0], "must be str");
      if (name == "count") return Value::integer(py::count(s, sub, opt_index(v[1]), opt_index(v[2])));
      int64_t r = py::find(s, sub, opt_index(v[1]), opt_index(v[2]), name[0] == 'r');
      if (r < 0 && (name == "index" || name == "rindex")) throw Error("substring not found");
      return Value::integer(r);
    });
  if (name == "join")
    return m([s](Interpreter&, CallArgs& a) {
      auto v = bind_args("join", a, {{"iterable", std::nullopt}});
      std::string out;
      size_t i = 0;
      for (const auto& item : v[0].iterate()) {
        if (!item.is_string())
          throw Error(fmt::format("sequence item {}: expected str instance, {} found", i, item.type_name()));
        if (i++) out += s;
        out += item.as_string();
      }
      return Value::string(std::move(out));
    });
  if (name == "partition" || name == "rpartition")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"sep", std::nullopt}});
      const std::string& sep = want_str(v[0], "must be str");
      if (sep.empty()) throw Error("empty separator");
      size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (hit == std::string::npos)
        return name == "partition" ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                                   : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
      return Value::tuple(
          {Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))});
    });
  if (name == "removeprefix" || name == "removesuffix")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"affix", std::nullopt}});
      const std::string& x = want_str(v[0], "must be str");
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
          s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()));
      return Value::string(s);
    });
  return std::nullopt;
}

// str methods that pad or format, and the ones mla.cpp does not support.
std::optional<Value> str_layout_method(const std::string& s, const std::string& name) {
  auto m = [&](Method fn) { return bound("str", name, std::move(fn)); };
  if (name == "center" || name == "ljust" || name == "rjust")
    return m([s, name](Interpreter&, CallArgs& a) {
      auto v = bind_args(name, a, {{"width", std::nullopt}, {"fillchar", Value::string(" ")}});
      char where = name == "center" ? 'c' : name == "ljust" ? 'l' : 'r';
      return Value::string(pad_str(s, want_int(v[0], name), want_str(v[1], "fillchar"), where));
    });
  if (name == "zfill")
    return m([s](Interpreter&, CallArgs& a) {
      auto v = bind_args("zfill", a, {{"width", std::nullopt}});
      int64_t width = want_int(v[0], "zfill");
      int64_t n = static_cast<int64_t>(py::length(s));
      if (width <= n) return Value::string(s);
      std::string zeros(static_cast<size_t>(width - n), '0');
      if (!s.empty() && (s[0] == '+' || s[0] == '-')) return Value::string(s.substr(0, 1) + zeros + s.substr(1));
      return Value::string(zeros + s);
    });
  if (name == "format") return m([s](Interpreter& in, CallArgs& a) { return Value::string(str_format(in, s, a)); });
  static const std::set<std::string> unsupported = {"encode",      "expandtabs", "format_map",
                                                    "isprintable", "maketrans",  "translate"};
  if (unsupported.count(name))
    return m([name](Interpreter&, CallArgs&) -> Value {
      throw Error(fmt::format("str.{}() is not supported by mla.cpp", name));
    });
  return std::nullopt;
}

std::optional<Value> str_method(const Value& self, const std::string& name) {
  const std::string& s = self.as_string();  // the methods capture copies
  if (auto v = str_text_method(s, name)) return v;
  if (auto v = str_search_method(s, name)) return v;
  return str_layout_method(s, name);
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  auto m = [&](Method fn) { return bound("dict", name, std::move(fn)); };
  const Value& data = self;  // the methods below capture copies
  if (name == "get")
    return m([data](Interpreter&, CallArgs& a) {
      auto v = bind_args("get", a, {{"key", std::nullopt}, {"default", Value::none()}});
      ptrdiff_t i = data.dict_data().find(v[0]);
      return i >= 0 ? data.dict_data().items[static_cast<size_t>(i)].second : v[1];
    });
  if (name == "items" || name == "keys" || name == "values")
    return m([data, name](Interpreter&, CallArgs& a) {
      bind_args(name, a, {});
      std::vector<Value> out;
      for (const auto& [k, v] : data.dict_data().items) {
        if (name == "items")
          out.push_back(Value::tuple({k, v}));
        else
          out.push_back(name == "keys" ? k : v);
      }
      SeqKind kind = name == "items"  ? SeqKind::SeqKind_dict_items
                     : name == "keys" ? SeqKind::SeqKind_dict_keys
                                      : SeqKind::SeqKind_dict_values;
      return Value::seq(std::move(out), kind);
    });
  if (name == "copy")
    return m([data](Interpreter&, CallArgs& a) {
      bind_args("copy", a, {});
      return Value::dict(std::make_shared<DictData>(data.dict_data()));
    });
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
    return unsafe(self, name);
  if (name == "fromkeys")
    return m([](Interpreter&, CallArgs&) -> Value { throw Error("dict.fromkeys() is not supported by mla.cpp"); });
  return std::nullopt;
}

std::optional<Value> seq_method(const Value& self, const std::string& name) {
  auto m = [&](Method fn) { return bound(self.type_name(), name, std::move(fn)); };
  Value data = self;
  if (name == "count")
    return m([data](Interpreter&, CallArgs& a) {
      auto v = bind_args("count", a, {{"value", std::nullopt}});
      int64_t n = 0;
      for (const auto& x : data.seq_data().items) n += py_eq(x, v[0]) ? 1 : 0;
      return Value::integer(n);
    });
  if (name == "index")
    return m([data](Interpreter&, CallArgs& a) {
      auto v = bind_args("index", a, {{"value", std::nullopt}, {"start", Value::integer(0)}, {"stop", Value::none()}});
      const auto& items = data.seq_data().items;
      std::optional<int64_t> b = opt_index(v[1]), e = opt_index(v[2]);
      py::adjust_range(static_cast<int64_t>(items.size()), b, e);
      for (int64_t i = *b; i < *e; ++i)
        if (py_eq(items[static_cast<size_t>(i)], v[0])) return Value::integer(i);
      throw Error(fmt::format("{} is not in {}", v[0].repr(), data.type_name()));
    });
  if (self.is_seq(SeqKind::SeqKind_list)) {
    if (name == "copy")
      return m([data](Interpreter&, CallArgs& a) {
        bind_args("copy", a, {});
        return Value::list(data.seq_data().items);
      });
    static const std::set<std::string> mutating = {"append", "clear",  "extend",  "insert",
                                                   "pop",    "remove", "reverse", "sort"};
    if (mutating.count(name)) return unsafe(self, name);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return str_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list_or_tuple()) return seq_method(obj, name);
  return std::nullopt;
}

}  // namespace mla::jinja
