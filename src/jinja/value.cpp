#include "jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "jinja/pystr.h"

namespace mla::jinja {

// ---- construction -----------------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Undef u;
  if (!hint.empty()) u.hint = std::make_shared<const std::string>(std::move(hint));
  return Value(std::move(u));
}

namespace {

uint32_t nesting_of(const Value& v) {
  if (v.is_seq()) return v.seq_data().depth;
  if (v.is_dict()) return v.dict_data().depth;
  return 0;
}

uint32_t checked_depth(uint32_t child_depth) {
  if (child_depth + 1 > k_max_nesting)
    throw Error(fmt::format("lists/dicts nested more than {} levels deep", k_max_nesting));
  return child_depth + 1;
}

// Bounds recursion through objects (a namespace holding a list holding the namespace).
struct ReprGuard {
  static inline thread_local int depth = 0;
  ReprGuard() {
    if (++depth > static_cast<int>(k_max_nesting)) {
      --depth;
      throw Error("maximum recursion depth exceeded while getting the repr of an object");
    }
  }
  ~ReprGuard() { --depth; }
};

}  // namespace

Value Value::seq(std::vector<Value> items, SeqKind kind) {
  auto d = std::make_shared<SeqData>();
  uint32_t child = 0;
  for (const auto& x : items) child = std::max(child, nesting_of(x));
  d->depth = checked_depth(child);
  d->kind = kind;
  d->items = std::move(items);
  return Value(std::move(d));
}

Value Value::lazy_iterator(std::function<std::vector<Value>()> produce) {
  Value v = seq({}, SeqKind::SeqKind_iterator);
  v.seq_data().pending = std::move(produce);
  return v;
}

Value Value::dict(std::shared_ptr<DictData> d) {
  if (!d) d = std::make_shared<DictData>();
  return Value(std::move(d));
}

Value Value::function(std::string name, std::string type_name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->type_name = std::move(type_name);
  f->call = std::move(fn);
  return Value(std::move(f));
}

Value Value::from_json(const nlohmann::ordered_json& j, uint32_t depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth >= k_max_nesting) throw Error(fmt::format("context JSON nested more than {} levels deep", k_max_nesting));
  switch (j.type()) {
    case T::null:
      return none();
    case T::boolean:
      return boolean(j.get<bool>());
    case T::number_integer:
      return integer(j.get<int64_t>());
    case T::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(fmt::format("integer {} in the context is out of the 64-bit range", u));
      return integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return floating(j.get<double>());
    case T::string:
      return string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<DictData>();
      for (const auto& [k, x] : j.items()) d->set(string(k), from_json(x, depth + 1));
      return dict(std::move(d));
    }
    default:
      throw Error("unsupported JSON value in the context (binary or discarded)");
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string empty;
  const auto& u = std::get<Undef>(v_);
  return u.hint ? *u.hint : empty;
}

void Value::throw_undefined() const {
  const std::string& h = undefined_hint();
  throw Error(h.empty() ? "value is undefined" : h);
}

const void* Value::identity() const {
  switch (type()) {
    case Type::Type_seq:
      return std::get<std::shared_ptr<SeqData>>(v_).get();
    case Type::Type_dict:
      return std::get<std::shared_ptr<DictData>>(v_).get();
    case Type::Type_object:
      return std::get<std::shared_ptr<Object>>(v_).get();
    case Type::Type_function:
      return std::get<std::shared_ptr<Function>>(v_).get();
    default:
      return nullptr;
  }
}

// NOLINTNEXTLINE(performance-unnecessary-value-param): the virtual takes a sink; overrides move it
void Object::set_attr(const std::string& name, Value) {
  throw Error(fmt::format("cannot assign attribute '{}' on a {} object", name, type_name()));
}

// ---- dict -------------------------------------------------------------------------------------

ptrdiff_t DictData::find(const Value& key) const {
  check_hashable(key);
  for (size_t i = 0; i < items.size(); ++i)
    if (py_eq(items[i].first, key)) return static_cast<ptrdiff_t>(i);
  return -1;
}

void DictData::set(Value key, Value value) {
  depth = std::max(depth, checked_depth(std::max(nesting_of(key), nesting_of(value))));
  ptrdiff_t i = find(key);
  if (i >= 0)
    items[static_cast<size_t>(i)].second = std::move(value);
  else
    items.emplace_back(std::move(key), std::move(value));
}

const Value* DictData::get(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

// ---- Python protocol --------------------------------------------------------------------------

bool Value::truthy() const {
  switch (type()) {
    case Type::Type_undefined:
    case Type::Type_none:
      return false;
    case Type::Type_bool:
      return as_bool();
    case Type::Type_int:
      return as_int() != 0;
    case Type::Type_float:
      return as_double() != 0.0;
    case Type::Type_string:
      return !as_string().empty();
    case Type::Type_seq:
      return seq_data().kind == SeqKind::SeqKind_iterator || !seq_data().items.empty();
    case Type::Type_dict:
      return !dict_data().items.empty();
    default:
      return true;
  }
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::Type_undefined:
      return "Undefined";
    case Type::Type_none:
      return "NoneType";
    case Type::Type_bool:
      return "bool";
    case Type::Type_int:
      return "int";
    case Type::Type_float:
      return "float";
    case Type::Type_string:
      return "str";
    case Type::Type_seq:
      switch (seq_data().kind) {
        case SeqKind::SeqKind_list:
          return "list";
        case SeqKind::SeqKind_tuple:
          return "tuple";
        case SeqKind::SeqKind_iterator:
          return "generator";
        case SeqKind::SeqKind_dict_keys:
          return "dict_keys";
        case SeqKind::SeqKind_dict_values:
          return "dict_values";
        case SeqKind::SeqKind_dict_items:
          return "dict_items";
        case SeqKind::SeqKind_range:
          return "range";
      }
      return "list";
    case Type::Type_dict:
      return "dict";
    case Type::Type_object:
      return object_ref().type_name();
    case Type::Type_function:
      return function_ref().type_name;
  }
  return "object";
}

std::string Value::object_type_repr() const {
  if (is_none()) return "None";
  return type_name() + " object";
}

namespace {

std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i].repr();
  }
  return out;
}

}  // namespace

std::string Value::repr() const {
  ReprGuard guard;
  switch (type()) {
    case Type::Type_undefined:
      return "Undefined";
    case Type::Type_none:
      return "None";
    case Type::Type_bool:
      return as_bool() ? "True" : "False";
    case Type::Type_int:
      return std::to_string(as_int());
    case Type::Type_float:
      return py::float_repr(as_double());
    case Type::Type_string:
      return py::repr(as_string());
    case Type::Type_seq: {
      const SeqData& s = seq_data();
      switch (s.kind) {
        case SeqKind::SeqKind_list:
          return "[" + join_repr(s.items) + "]";
        case SeqKind::SeqKind_tuple:
          return s.items.size() == 1 ? "(" + s.items[0].repr() + ",)" : "(" + join_repr(s.items) + ")";
        case SeqKind::SeqKind_dict_keys:
          return "dict_keys([" + join_repr(s.items) + "])";
        case SeqKind::SeqKind_dict_values:
          return "dict_values([" + join_repr(s.items) + "])";
        case SeqKind::SeqKind_dict_items:
          return "dict_items([" + join_repr(s.items) + "])";
        case SeqKind::SeqKind_range:
          return s.range_step == 1 ? fmt::format("range({}, {})", s.range_start, s.range_stop)
                                   : fmt::format("range({}, {}, {})", s.range_start, s.range_stop, s.range_step);
        case SeqKind::SeqKind_iterator:
          throw Error("cannot convert a generator to text (jinja2 prints its memory address); use '|list'");
      }
      return "";
    }
    case Type::Type_dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_data().items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + "}";
    }
    case Type::Type_object:
      return object_ref().repr();
    case Type::Type_function:
      if (!function_ref().repr.empty()) return function_ref().repr;
      throw Error(fmt::format("cannot convert {} to text (jinja2 prints its memory address)", function_ref().name));
  }
  return "";
}

std::string Value::str() const {
  if (is_string()) return as_string();
  if (is_undefined()) return "";
  return repr();
}

size_t Value::len() const {
  switch (type()) {
    case Type::Type_undefined:
      return 0;
    case Type::Type_string:
      return py::length(as_string());
    case Type::Type_seq:
      if (seq_data().kind == SeqKind::SeqKind_iterator) break;
      return seq_data().items.size();
    case Type::Type_dict:
      return dict_data().items.size();
    default:
      break;
  }
  throw Error(fmt::format("object of type '{}' has no len()", type_name()));
}

std::vector<Value> Value::iterate() const {
  switch (type()) {
    case Type::Type_undefined:
      return {};
    case Type::Type_string: {
      std::vector<Value> out;
      for (char32_t c : py::decode(as_string())) {
        std::string s;
        py::append_utf8(s, c);
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    case Type::Type_seq: {
      SeqData& s = seq_data();
      if (s.kind == SeqKind::SeqKind_iterator) {
        if (s.consumed) return {};
        s.consumed = true;
        if (s.pending) {
          auto produce = std::move(s.pending);
          s.pending = nullptr;
          return produce();
        }
      }
      return s.items;
    }
    case Type::Type_dict: {
      std::vector<Value> out;
      for (const auto& kv : dict_data().items) out.push_back(kv.first);
      return out;
    }
    default:
      break;
  }
  throw Error(fmt::format("'{}' object is not iterable", type_name()));
}

// ---- comparison -------------------------------------------------------------------------------

namespace {

bool num_eq(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
  return a.as_double() == b.as_double();
}

bool seq_eq(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!py_eq(a[i], b[i])) return false;
  return true;
}

}  // namespace

bool py_eq(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return num_eq(a, b);
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Type_undefined:
    case Value::Type::Type_none:
      return true;
    case Value::Type::Type_string:
      return a.as_string() == b.as_string();
    case Value::Type::Type_seq: {
      SeqKind ka = a.seq_data().kind, kb = b.seq_data().kind;
      if (ka == SeqKind::SeqKind_iterator || kb == SeqKind::SeqKind_iterator) return a.identity() == b.identity();
      if (ka != kb) return false;
      return seq_eq(a.seq_data().items, b.seq_data().items);
    }
    case Value::Type::Type_dict: {
      const auto& da = a.dict_data();
      const auto& db = b.dict_data();
      if (da.items.size() != db.items.size()) return false;
      for (const auto& [k, v] : da.items) {
        ptrdiff_t i = db.find(k);
        if (i < 0 || !py_eq(v, db.items[static_cast<size_t>(i)].second)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool py_lt(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order == code-point order
  if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.seq_data().kind == b.seq_data().kind) {
    const auto& x = a.seq_data().items;
    const auto& y = b.seq_data().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_eq(x[i], y[i])) return py_lt(x[i], y[i]);
    return x.size() < y.size();
  }
  throw Error(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

void check_hashable(const Value& v) {
  switch (v.type()) {
    case Value::Type::Type_seq:
      if (v.seq_data().kind == SeqKind::SeqKind_tuple) {
        for (const auto& x : v.seq_data().items) check_hashable(x);
        return;
      }
      if (v.seq_data().kind == SeqKind::SeqKind_list) break;
      return;
    case Value::Type::Type_dict:
      break;
    default:
      return;
  }
  throw Error(fmt::format("unhashable type: '{}'", v.type_name()));
}

// ---- json.dumps -------------------------------------------------------------------------------

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : py::decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      }
    } else {
      py::append_utf8(out, c);
    }
  }
  out.push_back('"');
}

std::string json_float(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return py::float_repr(x);
}

struct JsonWriter {
  const JsonDumpOptions& opt;
  std::string item_sep, key_sep;
  std::string out;
  int depth = 0;

  void newline_indent(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *opt.indent;
  }

  std::string key_text(const Value& k) {
    switch (k.type()) {
      case Value::Type::Type_string:
        return k.as_string();
      case Value::Type::Type_bool:
        return k.as_bool() ? "true" : "false";
      case Value::Type::Type_none:
        return "null";
      case Value::Type::Type_int:
        return std::to_string(k.as_int());
      case Value::Type::Type_float:
        return json_float(k.as_double());
      default:
        throw Error(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
    }
  }

  void write(const Value& v, int level) {
    if (++depth > static_cast<int>(k_max_nesting) + 1) throw Error("json.dumps: maximum nesting depth exceeded");
    switch (v.type()) {
      case Value::Type::Type_none:
        out += "null";
        break;
      case Value::Type::Type_bool:
        out += v.as_bool() ? "true" : "false";
        break;
      case Value::Type::Type_int:
        out += std::to_string(v.as_int());
        break;
      case Value::Type::Type_float:
        out += json_float(v.as_double());
        break;
      case Value::Type::Type_string:
        json_string(out, v.as_string(), opt.ensure_ascii);
        break;
      case Value::Type::Type_seq: {
        if (!v.is_list_or_tuple()) goto unserializable;
        const auto& items = v.seq_data().items;
        if (items.empty()) {
          out += "[]";
          break;
        }
        out.push_back('[');
        if (opt.indent) newline_indent(level + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out += item_sep;
            if (opt.indent) newline_indent(level + 1);
          }
          write(items[i], level + 1);
        }
        if (opt.indent) newline_indent(level);
        out.push_back(']');
        break;
      }
      case Value::Type::Type_dict: {
        std::vector<std::pair<Value, Value>> items = v.dict_data().items;
        if (items.empty()) {
          out += "{}";
          break;
        }
        if (opt.sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](const auto& a, const auto& b) { return py_lt(a.first, b.first); });
        out.push_back('{');
        if (opt.indent) newline_indent(level + 1);
        bool first = true;
        for (const auto& [k, x] : items) {
          if (!first) {
            out += item_sep;
            if (opt.indent) newline_indent(level + 1);
          }
          first = false;
          json_string(out, key_text(k), opt.ensure_ascii);
          out += key_sep;
          write(x, level + 1);
        }
        if (opt.indent) newline_indent(level);
        out.push_back('}');
        break;
      }
      default:
      unserializable:
        throw Error(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
    }
    --depth;
  }
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& opt) {
  JsonWriter w{opt, "", "", "", 0};
  if (opt.separators) {
    w.item_sep = opt.separators->first;
    w.key_sep = opt.separators->second;
  } else {
    w.item_sep = opt.indent ? "," : ", ";
    w.key_sep = ": ";
  }
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace mla::jinja
