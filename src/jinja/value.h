#pragma once
// The Jinja value model: what a Python object can be inside a chat template rendered by jinja2.
// Undefined (jinja2.Undefined), None, bool, int (64-bit here), float, str (UTF-8), sequences
// (list, tuple, one-shot iterators such as the generators filters return, dict views, range),
// dict (insertion ordered, keys are any hashable value), objects with attributes (namespace,
// loop) and callables (macros, globals, bound methods).
//
// Semantics follow CPython: truthiness, ==, <, len(), iteration, str() and repr(). Every error a
// Python operation would raise is a jinja::Error here; the interpreter adds the template position.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace mla::jinja {

class Value;
class Interpreter;

// An error raised while rendering (a Python exception in jinja2). line == 0: position unknown yet;
// the interpreter fills in the innermost expression or statement being evaluated.
class Error : public std::exception {
 public:
  explicit Error(std::string msg, int line = 0, int column = 0) : message(std::move(msg)), line(line), column(column) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
  int line;
  int column;
};

// Arguments of a call in Python order: positional, then keyword.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

enum class SeqKind : uint8_t {
  SeqKind_list,
  SeqKind_tuple,
  SeqKind_iterator,  // a generator/iterator: truthy, no len(), no indexing, consumed by one pass
  SeqKind_dict_keys,
  SeqKind_dict_values,
  SeqKind_dict_items,
  SeqKind_range,
};

struct SeqData {
  SeqKind kind = SeqKind::SeqKind_list;
  std::vector<Value> items;
  bool consumed = false;  // iterator only
  // iterator only: produces the items on first use. jinja2's generator filters (map, select,
  // items, ...) run lazily, so their errors surface only if the result is iterated.
  std::function<std::vector<Value>()> pending;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // range only, for repr()
  uint32_t depth = 1;                                       // nesting of lists/dicts, bounded by k_max_nesting
};

// Deeper list/dict nesting is an error: it bounds the recursion of repr, ==, json.dumps and
// destruction. (CPython's repr gives up at its recursion limit of 1000 as well.)
constexpr uint32_t k_max_nesting = 1000;

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order
  uint32_t depth = 1;
  // Index of key, or -1. Throws Error for an unhashable key, as Python does.
  ptrdiff_t find(const Value& key) const;
  void set(Value key, Value value);
  const Value* get(std::string_view key) const;  // string-key lookup
};

// An object with named attributes (namespace, loop context, ...).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // nullopt: no such attribute.
  virtual std::optional<Value> get_attr(const std::string& name) = 0;
  virtual std::string repr() const = 0;
  virtual bool is_namespace() const { return false; }
  virtual void set_attr(const std::string& name, Value v);  // namespaces only
  virtual void clear() {}                                   // drops references to other values (end of render)
};

struct Function {
  std::string name;       // for messages: "range", "macro 'render'", "str.split"
  std::string type_name;  // Python type: "builtin_function_or_method", "Macro", ...
  std::function<Value(Interpreter&, CallArgs&)> call;
  std::string repr;                 // repr() text; empty: jinja2 would print a memory address
  std::shared_ptr<DictData> attrs;  // readable attributes (a macro's name, arguments, ...)
};

class Value {
 public:
  enum class Type : uint8_t {
    Type_undefined,
    Type_none,
    Type_bool,
    Type_int,
    Type_float,
    Type_string,
    Type_seq,
    Type_dict,
    Type_object,
    Type_function,
  };

  Value() : v_(Undef{}) {}
  static Value undefined(std::string hint = "");
  static Value none() { return Value(NoneT{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double d) { return Value(d); }
  static Value string(std::string s) { return Value(std::move(s)); }
  static Value seq(std::vector<Value> items, SeqKind kind = SeqKind::SeqKind_list);
  static Value list(std::vector<Value> items) { return seq(std::move(items), SeqKind::SeqKind_list); }
  static Value tuple(std::vector<Value> items) { return seq(std::move(items), SeqKind::SeqKind_tuple); }
  static Value iterator(std::vector<Value> items) { return seq(std::move(items), SeqKind::SeqKind_iterator); }
  static Value lazy_iterator(std::function<std::vector<Value>()> produce);
  static Value dict(std::shared_ptr<DictData> d = nullptr);
  static Value object(std::shared_ptr<Object> o) { return Value(std::move(o)); }
  static Value function(std::string name, std::string type_name, std::function<Value(Interpreter&, CallArgs&)> fn);
  static Value function(std::shared_ptr<Function> f) { return Value(std::move(f)); }

  static Value from_json(const nlohmann::ordered_json& j, uint32_t depth = 0);

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::Type_undefined; }
  bool is_none() const { return type() == Type::Type_none; }
  bool is_bool() const { return type() == Type::Type_bool; }
  bool is_int() const { return type() == Type::Type_int; }
  bool is_float() const { return type() == Type::Type_float; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python numbers.Number
  bool is_integral() const { return is_bool() || is_int(); }              // isinstance(x, int)
  bool is_string() const { return type() == Type::Type_string; }
  bool is_seq() const { return type() == Type::Type_seq; }
  bool is_seq(SeqKind k) const { return is_seq() && seq_data().kind == k; }
  bool is_list_or_tuple() const { return is_seq(SeqKind::SeqKind_list) || is_seq(SeqKind::SeqKind_tuple); }
  bool is_dict() const { return type() == Type::Type_dict; }
  bool is_object() const { return type() == Type::Type_object; }
  bool is_function() const { return type() == Type::Type_function; }

  bool as_bool() const { return std::get<bool>(v_); }
  // bool or int as int64 (Python bool is an int).
  int64_t as_int() const { return is_bool() ? (std::get<bool>(v_) ? 1 : 0) : std::get<int64_t>(v_); }
  // Any number as double.
  double as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  SeqData& seq_data() const { return *std::get<std::shared_ptr<SeqData>>(v_); }
  DictData& dict_data() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  Object& object_ref() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const Function& function_ref() const { return *std::get<std::shared_ptr<Function>>(v_); }
  const std::string& undefined_hint() const;
  // The error jinja2 raises when an undefined value is used: "'x' is undefined", ...
  [[noreturn]] void throw_undefined() const;
  // Identity for mutable/opaque values (Python "is").
  const void* identity() const;

  // Python semantics.
  bool truthy() const;
  std::string str() const;               // str(x); undefined -> ""
  std::string repr() const;              // repr(x)
  std::string type_name() const;         // type(x).__name__
  std::string object_type_repr() const;  // jinja2's "'dict object'", "None", ...
  size_t len() const;                    // len(x); Error if unsized
  // The items a for-loop over x visits (string: characters, dict: keys, undefined: none).
  // Consumes iterators. Error if not iterable.
  std::vector<Value> iterate() const;

 private:
  struct Undef {
    std::shared_ptr<const std::string> hint;
  };
  struct NoneT {};
  using Storage = std::variant<Undef, NoneT, bool, int64_t, double, std::string, std::shared_ptr<SeqData>,
                               std::shared_ptr<DictData>, std::shared_ptr<Object>, std::shared_ptr<Function>>;
  template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, Value>>>
  explicit Value(T&& x) : v_(std::forward<T>(x)) {}
  Storage v_;
};

// Python ==, hashing-compatible: 1 == 1.0 == True.
bool py_eq(const Value& a, const Value& b);
// Python <; Error for unorderable types ("'<' not supported between instances of ...").
bool py_lt(const Value& a, const Value& b);
// Python hashability (str, numbers, None, tuples of hashables); Error otherwise.
void check_hashable(const Value& v);

// json.dumps(x, ensure_ascii, indent, separators, sort_keys) exactly as CPython writes it.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& opt);

}  // namespace mla::jinja
