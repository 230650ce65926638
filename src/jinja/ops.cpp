#include "jinja/ops.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "jinja/builtins.h"
#include "jinja/pystr.h"

namespace mla::jinja {
namespace {

constexpr size_t k_max_result_bytes = size_t{256} << 20;  // refuse "x" * 10**12 instead of exhausting memory

[[noreturn]] void overflow() { throw Error("integer overflow: mla.cpp template integers are 64-bit"); }

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  throw Error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::BinaryOp_add:
      return "+";
    case BinaryOp::BinaryOp_sub:
      return "-";
    case BinaryOp::BinaryOp_mul:
      return "*";
    case BinaryOp::BinaryOp_div:
      return "/";
    case BinaryOp::BinaryOp_floordiv:
      return "//";
    case BinaryOp::BinaryOp_mod:
      return "%";
    case BinaryOp::BinaryOp_pow:
      return "** or pow()";
    default:
      return "?";
  }
}

// CPython's float_divmod: floor quotient and remainder with the sign of the divisor.
std::pair<double, double> float_divmod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::seq({}, seq.seq_data().kind);
  size_t unit = seq.is_string() ? seq.as_string().size() : seq.seq_data().items.size() * sizeof(Value);
  if (unit != 0 && static_cast<uint64_t>(n) > k_max_result_bytes / unit) throw Error("repetition result is too large");
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.seq_data().items.begin(), seq.seq_data().items.end());
  return Value::seq(std::move(out), seq.seq_data().kind);
}

int64_t floordiv_int(int64_t a, int64_t b) {
  if (b == 0) throw Error("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t mod_int(int64_t a, int64_t b) {
  if (b == 0) throw Error("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value power(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    int64_t base = a.as_int(), e = b.as_int(), result = 1;
    while (e > 0) {
      if (e & 1) result = checked_mul(result, base);
      e >>= 1;
      if (e > 0) base = checked_mul(base, base);
    }
    return Value::integer(result);
  }
  double x = a.as_double(), y = b.as_double();
  if (x == 0 && y < 0) throw Error("0.0 cannot be raised to a negative power");
  if (x < 0 && std::floor(y) != y) throw Error("complex numbers are not supported (negative base, fractional power)");
  double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) throw Error("numerical result out of range");
  return Value::floating(r);
}

}  // namespace

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  // str.__mod__ accepts any right operand, an undefined one included
  if (op == BinaryOp::BinaryOp_mod && a.is_string()) return Value::string(percent_format(a.as_string(), b));
  if (a.is_undefined()) a.throw_undefined();
  if (b.is_undefined()) b.throw_undefined();
  bool nums = a.is_number() && b.is_number();
  bool ints = a.is_integral() && b.is_integral();
  switch (op) {
    case BinaryOp::BinaryOp_add:
      if (nums)
        return ints ? Value::integer(checked_add(a.as_int(), b.as_int()))
                    : Value::floating(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        if (a.as_string().size() + b.as_string().size() > k_max_result_bytes) throw Error("string result is too large");
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.seq_data().kind == b.seq_data().kind) {
        std::vector<Value> items = a.seq_data().items;
        items.insert(items.end(), b.seq_data().items.begin(), b.seq_data().items.end());
        return Value::seq(std::move(items), a.seq_data().kind);
      }
      if (a.is_string() || a.is_list_or_tuple())
        throw Error(
            fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
      unsupported("+", a, b);
    case BinaryOp::BinaryOp_sub:
      if (!nums) unsupported("-", a, b);
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      return Value::floating(a.as_double() - b.as_double());
    case BinaryOp::BinaryOp_mul:
      if (nums)
        return ints ? Value::integer(checked_mul(a.as_int(), b.as_int()))
                    : Value::floating(a.as_double() * b.as_double());
      if ((a.is_string() || a.is_list_or_tuple()) && b.is_integral()) return repeat(a, b.as_int());
      if ((b.is_string() || b.is_list_or_tuple()) && a.is_integral()) return repeat(b, a.as_int());
      if (a.is_string() || a.is_list_or_tuple() || b.is_string() || b.is_list_or_tuple())
        throw Error(fmt::format("can't multiply sequence by non-int of type '{}'",
                                (a.is_string() || a.is_list_or_tuple()) ? b.type_name() : a.type_name()));
      unsupported("*", a, b);
    case BinaryOp::BinaryOp_div:
      if (!nums) unsupported("/", a, b);
      if (b.as_double() == 0) throw Error("division by zero");
      return Value::floating(a.as_double() / b.as_double());
    case BinaryOp::BinaryOp_floordiv:
      if (!nums) unsupported("//", a, b);
      if (ints) return Value::integer(floordiv_int(a.as_int(), b.as_int()));
      if (b.as_double() == 0) throw Error("float floor division by zero");
      return Value::floating(float_divmod(a.as_double(), b.as_double()).first);
    case BinaryOp::BinaryOp_mod:
      if (!nums) unsupported("%", a, b);
      if (ints) return Value::integer(mod_int(a.as_int(), b.as_int()));
      if (b.as_double() == 0) throw Error("float modulo");
      return Value::floating(float_divmod(a.as_double(), b.as_double()).second);
    case BinaryOp::BinaryOp_pow:
      if (!nums) unsupported("** or pow()", a, b);
      return power(a, b);
    default:
      break;
  }
  throw Error(fmt::format("unsupported operator {}", op_symbol(op)));
}

Value unary_op(UnaryOp op, const Value& a) {
  if (op == UnaryOp::UnaryOp_not) return Value::boolean(!a.truthy());
  if (a.is_undefined()) a.throw_undefined();
  if (!a.is_number())
    throw Error(
        fmt::format("bad operand type for unary {}: '{}'", op == UnaryOp::UnaryOp_neg ? "-" : "+", a.type_name()));
  if (op == UnaryOp::UnaryOp_pos) return a.is_bool() ? Value::integer(a.as_int()) : a;
  if (a.is_float()) return Value::floating(-a.as_double());
  if (a.as_int() == std::numeric_limits<int64_t>::min()) overflow();
  return Value::integer(-a.as_int());
}

bool compare_op(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::CompareOp_eq:
      return py_eq(a, b);
    case CompareOp::CompareOp_ne:
      return !py_eq(a, b);
    case CompareOp::CompareOp_in:
      return contains(b, a);
    case CompareOp::CompareOp_notin:
      return !contains(b, a);
    default:
      break;
  }
  if (a.is_undefined()) a.throw_undefined();
  if (b.is_undefined()) b.throw_undefined();
  if (a.is_number() && b.is_number() && !(a.is_integral() && b.is_integral())) {
    double x = a.as_double(), y = b.as_double();  // NaN compares false both ways, as in Python
    switch (op) {
      case CompareOp::CompareOp_lt:
        return x < y;
      case CompareOp::CompareOp_le:
        return x <= y;
      case CompareOp::CompareOp_gt:
        return x > y;
      default:
        return x >= y;
    }
  }
  auto check = [&](const char* sym) {
    bool ok = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
              (a.is_list_or_tuple() && b.is_list_or_tuple() && a.seq_data().kind == b.seq_data().kind);
    if (!ok)
      throw Error(
          fmt::format("'{}' not supported between instances of '{}' and '{}'", sym, a.type_name(), b.type_name()));
  };
  switch (op) {
    case CompareOp::CompareOp_lt:
      check("<");
      return py_lt(a, b);
    case CompareOp::CompareOp_le:
      check("<=");
      return py_lt(a, b) || py_eq(a, b);
    case CompareOp::CompareOp_gt:
      check(">");
      return py_lt(b, a);
    default:
      check(">=");
      return py_lt(b, a) || py_eq(a, b);
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Type_undefined:
      return false;
    case Value::Type::Type_string:
      if (!item.is_string())
        throw Error(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::Type_seq: {
      if (container.seq_data().kind == SeqKind::SeqKind_dict_keys) check_hashable(item);
      for (const auto& x : container.iterate())
        if (py_eq(x, item)) return true;
      return false;
    }
    case Value::Type::Type_dict:
      return container.dict_data().find(item) >= 0;
    default:
      break;
  }
  throw Error(fmt::format("argument of type '{}' is not iterable", container.type_name()));
}

Value slice(const Value& obj, const std::optional<Value>& start, const std::optional<Value>& stop,
            const std::optional<Value>& step) {
  if (obj.is_undefined()) obj.throw_undefined();
  // jinja2 compiles slices to Python's obj[a:b:c] directly, so unsliceable objects raise.
  if (obj.is_dict()) throw Error("unhashable type: 'slice'");
  bool sliceable = obj.is_string() || obj.is_list_or_tuple() || obj.is_seq(SeqKind::SeqKind_range);
  if (!sliceable) throw Error(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  auto index_of = [](const std::optional<Value>& v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (v->is_undefined()) v->throw_undefined();
    if (!v->is_integral()) throw Error("slice indices must be integers or None or have an __index__ method");
    return v->as_int();
  };
  std::optional<int64_t> b = index_of(start), e = index_of(stop), s = index_of(step);
  int64_t st = s.value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  std::u32string chars;
  int64_t n;
  if (obj.is_string()) {
    chars = py::decode(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else {
    n = static_cast<int64_t>(obj.seq_data().items.size());
  }
  // PySlice_AdjustIndices
  int64_t lower = st < 0 ? -1 : 0, upper = st < 0 ? n - 1 : n;
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = lower;
    } else if (x >= n) {
      x = upper;
    }
    return x;
  };
  int64_t from = adjust(b, st < 0 ? upper : lower), to = adjust(e, st < 0 ? lower : upper);
  std::vector<size_t> idx;
  if (st > 0)
    for (int64_t i = from; i < to; i += st) idx.push_back(static_cast<size_t>(i));
  else
    for (int64_t i = from; i > to; i += st) idx.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string out;
    for (size_t i : idx) out.push_back(chars[i]);
    return Value::string(py::encode(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(obj.seq_data().items[i]);
  SeqKind kind = obj.is_seq(SeqKind::SeqKind_tuple) ? SeqKind::SeqKind_tuple : SeqKind::SeqKind_list;
  return Value::seq(std::move(out), kind);
}

}  // namespace mla::jinja
