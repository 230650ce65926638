// jinja2's builtin filters (jinja2/filters.py) with the same parameters, defaults and results,
// plus transformers' tojson override: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False). Filters that return generators in jinja2 (map, select,
// reject, selectattr, rejectattr, unique, batch, items, reverse) return one-shot iterators here.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/ops.h"
#include "jinja/pynum.h"
#include "jinja/pystr.h"

namespace mla::jinja {
namespace {

using P = Param;
const std::optional<Value> k_required = std::nullopt;

Value none() { return Value::none(); }
Value boolean(bool b) { return Value::boolean(b); }
Value integer(int64_t i) { return Value::integer(i); }

// soft_str: str(x), with undefined as "".
std::string text(const Value& v) { return v.str(); }

// Dotted attribute path as make_attrgetter splits it: "a.0.b" -> ["a", 0, "b"].
std::vector<Value> attr_parts(const Value& attribute) {
  if (attribute.is_none()) return {};
  if (!attribute.is_string()) return {attribute};
  std::vector<Value> parts;
  for (auto& p : py::split(attribute.as_string(), std::string("."), -1)) {
    bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits ? Value::integer(py::digits_value(p)) : Value::string(p));
  }
  return parts;
}

Value get_path(Interpreter& in, Value item, const std::vector<Value>& parts, const Value* dflt = nullptr) {
  for (const auto& part : parts) {
    item = in.getitem(item, part);
    if (dflt && !dflt->is_none() && item.is_undefined()) item = *dflt;
  }
  return item;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py::lower(v.as_string())) : v; }

bool less(const Value& a, const Value& b) { return compare_op(CompareOp::CompareOp_lt, a, b); }

// sorted(items, key=key, reverse=reverse): stable, using only <, as CPython does.
void py_sort(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
}

// ---- filters ----------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("abs", a, {});
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_number()) throw Error(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.as_int() == std::numeric_limits<int64_t>::min()) throw Error("integer overflow in abs()");
  return integer(std::llabs(v.as_int()));
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind_args("attr", a, {{"name", k_required}});
  if (v.is_undefined()) v.throw_undefined();
  std::string name = text(p[0]);
  if (v.is_object()) {
    if (auto r = v.object_ref().get_attr(name)) return *r;
  } else if (auto m = find_method(v, name)) {
    return *m;
  }
  (void)in;
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", v.object_type_repr(), name));
}

Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("batch", a, {{"linecount", k_required}, {"fill_with", none()}});
  if (!p[0].is_integral()) throw Error("batch(): linecount must be an integer");
  return Value::lazy_iterator([v, p] {
    int64_t n = p[0].as_int();
    std::vector<Value> out, tmp;
    for (auto& item : v.iterate()) {
      if (static_cast<int64_t>(tmp.size()) == n) {
        out.push_back(Value::list(std::move(tmp)));
        tmp.clear();
      }
      tmp.push_back(std::move(item));
    }
    if (!tmp.empty()) {
      if (!p[1].is_none())
        while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(p[1]);
      out.push_back(Value::list(std::move(tmp)));
    }
    return out;
  });
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("capitalize", a, {});
  return Value::string(py::capitalize(text(v)));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind_args("center", a, {{"width", integer(80)}});
  Value s = Value::string(text(v));
  CallArgs ca;
  ca.args.push_back(p[0]);
  return in.call(*find_method(s, "center"), ca);
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("default", a, {{"default_value", Value::string("")}, {"boolean", boolean(false)}});
  if (v.is_undefined() || (p[1].truthy() && !v.truthy())) return p[0];
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("dictsort", a,
                     {{"case_sensitive", boolean(false)}, {"by", Value::string("key")}, {"reverse", boolean(false)}});
  if (!v.is_dict()) throw Error(fmt::format("'{}' object has no attribute 'items'", v.type_name()));
  std::string by = text(p[1]);
  if (by != "key" && by != "value") throw Error("You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, x] : v.dict_data().items) {
    Value key = by == "key" ? k : x;
    if (!p[0].truthy()) key = ignore_case(key);
    keyed.emplace_back(key, Value::tuple({k, x}));
  }
  py_sort(keyed, p[2].truthy());
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("escape", a, {});
  std::string out;
  for (char c : text(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value::string(std::move(out));
}

Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("first", a, {});
  if (v.is_seq(SeqKind::SeqKind_iterator)) {
    SeqData& s = v.seq_data();
    if (s.pending) {
      s.items = v.iterate();
      s.consumed = false;
    }
    if (s.consumed || s.items.empty()) return Value::undefined("No first item, sequence was empty.");
    Value first = s.items.front();
    s.items.erase(s.items.begin());  // the rest stays available, as with next() on a generator
    return first;
  }
  std::vector<Value> items = v.iterate();
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("last", a, {});
  if (v.is_seq(SeqKind::SeqKind_iterator) || (!v.is_undefined() && !v.is_string() && !v.is_seq() && !v.is_dict()))
    throw Error(fmt::format("'{}' object is not reversible", v.type_name()));
  std::vector<Value> items = v.iterate();
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("int", a, {{"default", integer(0)}, {"base", integer(10)}});
  if (v.is_undefined()) v.throw_undefined();
  if (v.is_integral()) return integer(v.as_int());
  auto from_double = [&](double x) -> Value {
    if (!std::isfinite(x) || std::fabs(x) >= 9.2e18) return p[0];
    return integer(static_cast<int64_t>(std::trunc(x)));
  };
  if (v.is_float()) return from_double(v.as_double());
  if (v.is_string()) {
    if (!p[1].is_integral()) return p[0];
    if (auto i = py::parse_int(v.as_string(), p[1].as_int())) return integer(*i);
    if (auto x = py::parse_float(v.as_string())) return from_double(*x);
  }
  return p[0];
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("float", a, {{"default", Value::floating(0.0)}});
  if (v.is_undefined()) v.throw_undefined();
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string())
    if (auto x = py::parse_float(v.as_string())) return Value::floating(*x);
  return p[0];
}

Value f_format(Interpreter&, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty())
    throw Error("can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    auto d = std::make_shared<DictData>();
    for (auto& [k, x] : a.kwargs) d->set(Value::string(k), x);
    return Value::string(percent_format(text(v), Value::dict(d)));
  }
  return Value::string(percent_format(text(v), Value::tuple(a.args)));
}

Value f_indent(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("indent", a, {{"width", integer(4)}, {"first", boolean(false)}, {"blank", boolean(false)}});
  std::string indention;
  if (p[0].is_string()) {
    indention = p[0].as_string();
  } else {
    if (!p[0].is_integral())
      throw Error(fmt::format("can't multiply sequence by non-int of type '{}'", p[0].type_name()));
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, p[0].as_int())), ' ');
  }
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_string()) throw Error(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", v.type_name()));
  std::vector<std::string> lines = py::splitlines(v.as_string() + "\n", false);
  std::string rv;
  if (p[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  if (p[1].truthy()) rv = indention + rv;
  return Value::string(std::move(rv));
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("items", a, {});
  return Value::lazy_iterator([v] {
    std::vector<Value> out;
    if (v.is_undefined()) return out;
    if (!v.is_dict()) throw Error("Can only get item pairs from a mapping.");
    for (const auto& [k, x] : v.dict_data().items) out.push_back(Value::tuple({k, x}));
    return out;
  });
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind_args("join", a, {{"d", Value::string("")}, {"attribute", none()}});
  std::vector<Value> parts = attr_parts(p[1]);
  std::string sep = text(p[0]), out;
  size_t i = 0;
  for (const auto& item : v.iterate()) {
    if (i++) out += sep;
    out += text(p[1].is_none() ? item : get_path(in, item, parts));
  }
  return Value::string(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("length", a, {});
  return integer(static_cast<int64_t>(v.len()));
}

Value f_list(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("list", a, {});
  return Value::list(v.iterate());
}

Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("lower", a, {});
  return Value::string(py::lower(text(v)));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("upper", a, {});
  return Value::string(py::upper(text(v)));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  bool by_attribute = a.args.empty() && std::any_of(a.kwargs.begin(), a.kwargs.end(),
                                                    [](const auto& kv) { return kv.first == "attribute"; });
  if (by_attribute) {
    auto p = bind_args("map", a, {{"attribute", k_required}, {"default", none()}});
    return Value::lazy_iterator([&in, v, p] {
      std::vector<Value> out, parts = attr_parts(p[0]);
      for (const auto& item : v.iterate()) out.push_back(get_path(in, item, parts, &p[1]));
      return out;
    });
  }
  if (a.args.empty()) throw Error("map requires a filter argument");
  std::string name = text(a.args[0]);
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  return Value::lazy_iterator([&in, v, name, rest] {
    std::vector<Value> out;
    for (const auto& item : v.iterate()) {
      CallArgs each = rest;
      out.push_back(in.apply_filter(name, item, each));
    }
    return out;
  });
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool is_max) {
  auto p = bind_args(is_max ? "max" : "min", a, {{"case_sensitive", boolean(false)}, {"attribute", none()}});
  std::vector<Value> items = v.iterate();
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::vector<Value> parts = attr_parts(p[1]);
  auto key = [&](const Value& x) {
    Value k = get_path(in, x, parts);
    return p[0].truthy() ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (is_max ? compare_op(CompareOp::CompareOp_gt, k, best_key) : less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }

// select/reject/selectattr/rejectattr (jinja2's prepare_select_or_reject).
Value select_reject(Interpreter& in, const Value& v, CallArgs& a, bool lookup_attr, bool keep_if) {
  std::vector<Value> parts;
  size_t off = 0;
  if (lookup_attr) {
    if (a.args.empty()) throw Error("Missing parameter for attribute name");
    parts = attr_parts(a.args[0]);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (a.args.size() > off) {
    test = text(a.args[off]);
    test_args.args.assign(a.args.begin() + static_cast<ptrdiff_t>(off) + 1, a.args.end());
  }
  test_args.kwargs = a.kwargs;
  return Value::lazy_iterator([&in, v, parts, test, test_args, lookup_attr, keep_if] {
    std::vector<Value> out;
    for (const auto& item : v.iterate()) {
      Value x = lookup_attr ? get_path(in, item, parts) : item;
      bool ok;
      if (test) {
        CallArgs each = test_args;
        ok = in.apply_test(*test, x, each);
      } else {
        ok = x.truthy();
      }
      if (ok == keep_if) out.push_back(item);
    }
    return out;
  });
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_reject(in, v, a, true, false); }

Value f_replace(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("replace", a, {{"old", k_required}, {"new", k_required}, {"count", none()}});
  int64_t count = -1;
  if (!p[2].is_none()) {
    if (!p[2].is_integral())
      throw Error(fmt::format("'{}' object cannot be interpreted as an integer", p[2].type_name()));
    count = p[2].as_int();
  }
  return Value::string(py::replace(text(v), text(p[0]), text(p[1]), count));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = py::decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value::string(py::encode(u));
  }
  if (v.is_none() || v.is_number() || v.is_object() || v.is_function()) throw Error("argument must be iterable");
  std::vector<Value> items = v.iterate();
  std::reverse(items.begin(), items.end());
  // reversed(seq) is an iterator; a generator cannot be reversed and becomes a list instead
  return v.is_seq(SeqKind::SeqKind_iterator) ? Value::list(std::move(items)) : Value::iterator(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("round", a, {{"precision", integer(0)}, {"method", Value::string("common")}});
  std::string method = text(p[1]);
  if (method != "common" && method != "ceil" && method != "floor") throw Error("method must be common, ceil or floor");
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_number()) throw Error(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (!p[0].is_integral())
    throw Error(fmt::format("'{}' object cannot be interpreted as an integer", p[0].type_name()));
  int64_t prec = p[0].as_int();
  if (method == "common") {
    if (v.is_integral()) {
      if (prec >= 0) return integer(v.as_int());
      return Value::integer(static_cast<int64_t>(py::round(static_cast<double>(v.as_int()), prec)));
    }
    return Value::floating(py::round(v.as_double(), prec));
  }
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("safe", a, {});
  return Value::string(text(v));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  auto p =
      bind_args("sort", a, {{"reverse", boolean(false)}, {"case_sensitive", boolean(false)}, {"attribute", none()}});
  std::vector<std::vector<Value>> paths;
  if (p[2].is_string()) {
    for (auto& part : py::split(p[2].as_string(), std::string(","), -1))
      paths.push_back(attr_parts(Value::string(part)));
  } else {
    paths.push_back(attr_parts(p[2]));
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : v.iterate()) {
    std::vector<Value> key;
    for (const auto& path : paths) {
      Value k = get_path(in, item, path);
      key.push_back(p[1].truthy() ? k : ignore_case(k));
    }
    keyed.emplace_back(Value::list(std::move(key)), std::move(item));
  }
  py_sort(keyed, p[0].truthy());
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_string(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("string", a, {});
  return Value::string(text(v));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind_args("sum", a, {{"attribute", none()}, {"start", integer(0)}});
  if (p[1].is_string()) throw Error("sum() can't sum strings [use ''.join(seq) instead]");
  std::vector<Value> parts = attr_parts(p[0]);
  Value total = p[1];
  for (const auto& item : v.iterate()) total = binary_op(BinaryOp::BinaryOp_add, total, get_path(in, item, parts));
  return total;
}

Value f_title(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("title", a, {});
  // jinja2: split on runs of [-\s({\[<] and capitalise each piece's first character.
  std::u32string u = py::decode(text(v));
  auto is_sep = [](char32_t c) { return py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  std::string out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    if (sep) {
      out += py::encode(u.substr(i, j - i));
    } else {
      out += py::upper(py::encode(u.substr(i, 1)));
      out += py::lower(py::encode(u.substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value::string(std::move(out));
}

Value f_tojson(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args(
      "tojson", a,
      {{"ensure_ascii", boolean(false)}, {"indent", none()}, {"separators", none()}, {"sort_keys", boolean(false)}});
  JsonDumpOptions opt;
  opt.ensure_ascii = p[0].truthy();
  if (p[1].is_string()) {
    opt.indent = p[1].as_string();
  } else if (p[1].is_integral()) {
    opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, p[1].as_int())), ' ');
  } else if (!p[1].is_none()) {
    throw Error(fmt::format("tojson: indent must be an int, a str or None, not {}", p[1].type_name()));
  }
  if (!p[2].is_none()) {
    std::vector<Value> seps = p[2].iterate();
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      throw Error("tojson: separators must be an (item_separator, key_separator) pair of strings");
    opt.separators = std::make_pair(seps[0].as_string(), seps[1].as_string());
  }
  opt.sort_keys = p[3].truthy();
  return Value::string(json_dumps(v, opt));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args("trim", a, {{"chars", none()}});
  std::optional<std::string> chars;
  if (!p[0].is_none()) {
    if (!p[0].is_string()) throw Error(fmt::format("strip arg must be None or str, not {}", p[0].type_name()));
    chars = p[0].as_string();
  }
  return Value::string(py::strip(text(v), chars, true, true));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  auto p = bind_args(
      "truncate", a,
      {{"length", integer(255)}, {"killwords", boolean(false)}, {"end", Value::string("...")}, {"leeway", none()}});
  if (!p[0].is_integral() || !(p[3].is_none() || p[3].is_integral()))
    throw Error("truncate(): length and leeway must be integers");
  int64_t length = p[0].as_int(), leeway = p[3].is_none() ? 5 : p[3].as_int();
  std::u32string end = py::decode(text(p[2]));
  if (length < static_cast<int64_t>(end.size()))
    throw Error(fmt::format("expected length >= {}, got {}", end.size(), length));
  if (!v.is_string()) {  // jinja2 takes len() of whatever it gets and slices it
    if (static_cast<int64_t>(v.len()) <= length + leeway) return v;
    throw Error(fmt::format("'{}' object has no attribute 'rsplit'", v.type_name()));
  }
  std::u32string s = py::decode(v.as_string());
  if (static_cast<int64_t>(s.size()) <= length + leeway) return v;
  std::u32string head = s.substr(0, static_cast<size_t>(length) - end.size());
  if (!p[1].truthy()) {
    size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head = head.substr(0, sp);
  }
  return Value::string(py::encode(head + end));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  auto p = bind_args("unique", a, {{"case_sensitive", boolean(false)}, {"attribute", none()}});
  return Value::lazy_iterator([&in, v, p] {
    std::vector<Value> parts = attr_parts(p[1]);
    std::vector<Value> seen, out;
    for (auto& item : v.iterate()) {
      Value key = get_path(in, item, parts);
      if (!p[0].truthy()) key = ignore_case(key);
      check_hashable(key);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_eq(s, key); })) {
        seen.push_back(key);
        out.push_back(std::move(item));
      }
    }
    return out;
  });
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
  bind_args("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode(text(v))) {
    bool w = py::is_word(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return integer(n);
}

template <const char* Name>
Value f_unsupported(Interpreter&, const Value&, CallArgs&) {
  throw Error(fmt::format("filter '{}' is not supported by mla.cpp", Name));
}
constexpr char k_filesizeformat[] = "filesizeformat", k_groupby[] = "groupby", k_pprint[] = "pprint",
               k_random[] = "random", k_slice[] = "slice", k_striptags[] = "striptags", k_urlencode[] = "urlencode",
               k_urlize[] = "urlize", k_wordwrap[] = "wordwrap", k_xmlattr[] = "xmlattr";

const std::map<std::string, FilterFn, std::less<>>& filter_table() {
  static const std::map<std::string, FilterFn, std::less<>> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"filesizeformat", f_unsupported<k_filesizeformat>},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_escape},
      {"format", f_format},
      {"groupby", f_unsupported<k_groupby>},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"pprint", f_unsupported<k_pprint>},
      {"random", f_unsupported<k_random>},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"slice", f_unsupported<k_slice>},
      {"sort", f_sort},
      {"string", f_string},
      {"striptags", f_unsupported<k_striptags>},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", f_upper},
      {"urlencode", f_unsupported<k_urlencode>},
      {"urlize", f_unsupported<k_urlize>},
      {"wordcount", f_wordcount},
      {"wordwrap", f_unsupported<k_wordwrap>},
      {"xmlattr", f_unsupported<k_xmlattr>},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = filter_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace mla::jinja
