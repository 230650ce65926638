// jinja2's builtin tests (jinja2/tests.py): `x is defined`, `x is string`, `x is divisibleby 3`...
#include <fmt/format.h>

#include <map>

#include "jinja/builtins.h"
#include "jinja/ops.h"
#include "jinja/pystr.h"

namespace mla::jinja {
namespace {

const std::optional<Value> k_required = std::nullopt;

void no_args(std::string_view name, CallArgs& a) { bind_args(name, a, {}); }

Value one_arg(std::string_view name, CallArgs& a) { return bind_args(name, a, {{"other", k_required}})[0]; }

// value % n == r, with Python semantics (also raises for undefined and strings).
bool mod_is(const Value& v, int64_t n, int64_t r) {
  Value m = binary_op(BinaryOp::BinaryOp_mod, v, Value::integer(n));
  return py_eq(m, Value::integer(r));
}

bool t_odd(Interpreter&, const Value& v, CallArgs& a) {
  no_args("odd", a);
  return mod_is(v, 2, 1);
}
bool t_even(Interpreter&, const Value& v, CallArgs& a) {
  no_args("even", a);
  return mod_is(v, 2, 0);
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  Value num = bind_args("divisibleby", a, {{"num", k_required}})[0];
  return py_eq(binary_op(BinaryOp::BinaryOp_mod, v, num), Value::integer(0));
}
bool t_defined(Interpreter&, const Value& v, CallArgs& a) {
  no_args("defined", a);
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  no_args("undefined", a);
  return v.is_undefined();
}
bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_string() && find_test(v.as_string()) != nullptr;
}
bool t_none(Interpreter&, const Value& v, CallArgs& a) {
  no_args("none", a);
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  no_args("boolean", a);
  return v.is_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& a) {
  no_args("false", a);
  return v.is_bool() && !v.as_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs& a) {
  no_args("true", a);
  return v.is_bool() && v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& a) {
  no_args("integer", a);
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& a) {
  no_args("float", a);
  return v.is_float();
}
bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  no_args("lower", a);
  std::string s = v.str();
  return !s.empty() && py::lower(s) == s && py::upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  no_args("upper", a);
  std::string s = v.str();
  return !s.empty() && py::upper(s) == s && py::lower(s) != s;
}
bool t_string(Interpreter&, const Value& v, CallArgs& a) {
  no_args("string", a);
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  no_args("mapping", a);
  return v.is_dict();
}
bool t_number(Interpreter&, const Value& v, CallArgs& a) {
  no_args("number", a);
  return v.is_number();
}
// len(x) and x.__getitem__ exist: str, list, tuple, range, dict, and jinja2's Undefined.
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_undefined() || v.is_string() || v.is_dict() || v.is_list_or_tuple() || v.is_seq(SeqKind::SeqKind_range);
}
bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  return v.is_undefined() || v.is_string() || v.is_seq() || v.is_dict() ||
         (v.is_object() && v.object_ref().type_name() == "LoopContext");
}
bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  return v.is_function() || v.is_undefined() || (v.is_object() && v.object_ref().type_name() == "LoopContext");
}
// `is`: singletons and identical containers; CPython caches small ints, so they are identical too.
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  Value other = bind_args("sameas", a, {{"other", k_required}})[0];
  if (v.type() != other.type()) return false;
  switch (v.type()) {
    case Value::Type::Type_none:
      return true;
    case Value::Type::Type_undefined:
      return false;
    case Value::Type::Type_bool:
      return v.as_bool() == other.as_bool();
    case Value::Type::Type_int:
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Type::Type_float:
      return false;
    case Value::Type::Type_string:
      return v.as_string() == other.as_string();
    default:
      return v.identity() == other.identity();
  }
}
bool t_escaped(Interpreter&, const Value&, CallArgs& a) {
  no_args("escaped", a);
  return false;  // no Markup objects without autoescape
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  Value seq = bind_args("in", a, {{"seq", k_required}})[0];
  return contains(seq, v);
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
  return compare_op(CompareOp::CompareOp_eq, v, one_arg("eq", a));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
  return compare_op(CompareOp::CompareOp_ne, v, one_arg("ne", a));
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return compare_op(CompareOp::CompareOp_gt, v, one_arg("gt", a));
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  return compare_op(CompareOp::CompareOp_ge, v, one_arg("ge", a));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return compare_op(CompareOp::CompareOp_lt, v, one_arg("lt", a));
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  return compare_op(CompareOp::CompareOp_le, v, one_arg("le", a));
}

const std::map<std::string, TestFn, std::less<>>& test_table() {
  static const std::map<std::string, TestFn, std::less<>> table = {
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"filter", t_filter},
      {"test", t_test},
      {"none", t_none},
      {"boolean", t_boolean},
      {"false", t_false},
      {"true", t_true},
      {"integer", t_integer},
      {"float", t_float},
      {"lower", t_lower},
      {"upper", t_upper},
      {"string", t_string},
      {"mapping", t_mapping},
      {"number", t_number},
      {"sequence", t_sequence},
      {"iterable", t_iterable},
      {"callable", t_callable},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
      {"in", t_in},
      {"==", t_eq},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"!=", t_ne},
      {"ne", t_ne},
      {">", t_gt},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">=", t_ge},
      {"ge", t_ge},
      {"<", t_lt},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<=", t_le},
      {"le", t_le},
  };
  return table;
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& t = test_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace mla::jinja
