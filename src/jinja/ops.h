#pragma once
// Python operators on jinja values: arithmetic, comparison, membership and slicing, raising the
// TypeError/ZeroDivisionError Python would (as jinja::Error). Any arithmetic or ordering with an
// undefined operand raises jinja2's UndefinedError; == and `in` do not.
#include <optional>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace mla::jinja {

Value binary_op(BinaryOp op, const Value& a, const Value& b);  // not and/or (those short-circuit)
Value unary_op(UnaryOp op, const Value& a);
bool compare_op(CompareOp op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // `item in container`
// obj[start:stop:step] for str, list, tuple and range; nullopt for a missing part. Other
// objects raise, as Python's slicing does.
Value slice(const Value& obj, const std::optional<Value>& start, const std::optional<Value>& stop,
            const std::optional<Value>& step);

// Python's str(x) of a number or checks: int64 addition etc. with overflow errors.
int64_t checked_add(int64_t a, int64_t b);
int64_t checked_mul(int64_t a, int64_t b);

}  // namespace mla::jinja
