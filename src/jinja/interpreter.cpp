#include "jinja/interpreter.h"

#include <fmt/format.h>

#include "jinja/builtins.h"
#include "jinja/globals.h"
#include "jinja/ops.h"

namespace mla::jinja {
namespace {

constexpr int k_max_call_depth = 200;  // Python's recursion limit would stop a runaway macro too

// Attaches the position of the innermost node being evaluated to errors that have none yet.
template <typename F>
auto at_pos(const Pos& p, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (Error& e) {
    if (e.line == 0) {
      e.line = p.line;
      e.column = p.column;
    }
    throw;
  }
}

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent ? s->parent.get() : s->closure_parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

// The globals hold no per-render state, so every render shares one read-only scope.
Interpreter::Interpreter(const RenderOptions& opt) : opt_(opt) {
  static const ScopePtr globals = make_globals();
  globals_ = globals;
}

Interpreter::~Interpreter() {
  for (auto& o : owned_) o->clear();
}

std::string Interpreter::render(const Body& body, const Value& context,
                                const std::vector<std::string>& root_undefined) {
  auto root = std::make_shared<Scope>();
  root->parent = globals_;
  if (context.is_dict())
    for (const auto& [k, v] : context.dict_data().items)
      if (k.is_string()) root->vars[k.as_string()] = v;
  for (const auto& name : root_undefined) root->vars[name] = Value::undefined(fmt::format("'{}' is undefined", name));
  std::string out;
  exec_body(body, root, out);
  return out;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  if (const Value* v = scope->find(name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

// ---- statements -------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::Flow_normal) return f;
  }
  return Flow::Flow_normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  return at_pos(s.pos, [&]() -> Flow {
    switch (s.kind) {
      case StmtKind::StmtKind_output:
        for (const auto& piece : static_cast<const OutputStmt&>(s).pieces) {
          if (piece.expr)
            out += eval(*piece.expr, scope).str();
          else
            out += piece.text;
        }
        return Flow::Flow_normal;
      case StmtKind::StmtKind_if: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [test, body] : st.branches)
          if (eval(*test, scope).truthy()) return exec_body(body, scope, out);
        return exec_body(st.else_body, scope, out);
      }
      case StmtKind::StmtKind_for:
        exec_for(static_cast<const ForStmt&>(s), scope, out);
        return Flow::Flow_normal;
      case StmtKind::StmtKind_set: {
        const auto& st = static_cast<const SetStmt&>(s);
        assign(*st.target, eval(*st.value, scope), scope);
        return Flow::Flow_normal;
      }
      case StmtKind::StmtKind_set_block: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::string text;
        exec_body(st.body, inner, text);
        Value v = Value::string(std::move(text));
        if (st.filter) v = apply_filter_chain(*st.filter, std::move(v), inner);
        assign(*st.target, std::move(v), scope);
        return Flow::Flow_normal;
      }
      case StmtKind::StmtKind_macro: {
        const auto& m = static_cast<const MacroStmt&>(s);
        scope->vars[m.name] = make_macro(m, scope);
        return Flow::Flow_normal;
      }
      case StmtKind::StmtKind_call_block: {
        const auto& cb = static_cast<const CallBlockStmt&>(s);
        const auto& call = static_cast<const CallExpr&>(*cb.call);
        Value callee = eval(*call.callee, scope);
        CallArgs args = eval_args(call.args, scope);
        args.kwargs.emplace_back("caller", make_macro(cb, scope));
        out += at_pos(call.pos, [&] { return this->call(callee, args); }).str();
        return Flow::Flow_normal;
      }
      case StmtKind::StmtKind_filter_block: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::string text;
        exec_body(st.body, inner, text);
        out += apply_filter_chain(*st.filter, Value::string(std::move(text)), inner).str();
        return Flow::Flow_normal;
      }
      case StmtKind::StmtKind_with: {
        const auto& st = static_cast<const WithStmt&>(s);
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (const auto& [target, value] : st.assignments) assign(*target, eval(*value, scope), inner);
        return exec_body(st.body, inner, out);
      }
      case StmtKind::StmtKind_scope: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        exec_body(static_cast<const ScopeStmt&>(s).body, inner, out);
        return Flow::Flow_normal;
      }
      case StmtKind::StmtKind_break:
        return Flow::Flow_break;
      case StmtKind::StmtKind_continue:
        return Flow::Flow_continue;
    }
    return Flow::Flow_normal;
  });
}

void Interpreter::exec_for(const ForStmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*s.iter, scope);
  std::vector<Value> items = at_pos(s.iter->pos, [&] { return iterable.iterate(); });
  if (s.filter) {
    // jinja2 filters before the loop context exists: loop.index/length count kept items only.
    std::vector<Value> kept;
    for (auto& item : items) {
      auto test_scope = std::make_shared<Scope>();
      test_scope->parent = scope;
      assign(*s.target, item, test_scope);
      if (eval(*s.filter, test_scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    exec_body(s.else_body, inner, out);
    return;
  }
  auto loop = std::make_shared<LoopObject>(items);
  Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items.size(); ++i) {
    loop->index0 = static_cast<int64_t>(i);
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    inner->vars["loop"] = loop_value;
    at_pos(s.target->pos, [&] { assign(*s.target, items[i], inner); });
    if (exec_body(s.body, inner, out) == Flow::Flow_break) break;
  }
}

void Interpreter::assign(const Expr& target, Value v, const ScopePtr& scope) {
  switch (target.kind) {
    case ExprKind::ExprKind_name:
      scope->vars[static_cast<const NameExpr&>(target).name] = std::move(v);
      return;
    case ExprKind::ExprKind_nsref: {
      const auto& ns = static_cast<const NsRefExpr&>(target);
      Value obj = lookup(ns.name, scope);
      if (!obj.is_object() || !obj.object_ref().is_namespace())
        throw Error(fmt::format("cannot assign attribute on non-namespace object '{}'", ns.name), target.pos.line,
                    target.pos.column);
      obj.object_ref().set_attr(ns.attr, std::move(v));
      return;
    }
    case ExprKind::ExprKind_tuple: {
      const auto& names = static_cast<const SeqExpr&>(target).items;
      std::vector<Value> items = v.iterate();
      if (items.size() > names.size())
        throw Error(fmt::format("too many values to unpack (expected {})", names.size()));
      if (items.size() < names.size())
        throw Error(fmt::format("not enough values to unpack (expected {}, got {})", names.size(), items.size()));
      for (size_t i = 0; i < names.size(); ++i) assign(*names[i], std::move(items[i]), scope);
      return;
    }
    default:
      throw Error("can't assign to this expression", target.pos.line, target.pos.column);
  }
}

Value Interpreter::make_macro(const MacroStmt& m, const ScopePtr& scope) {
  const MacroStmt* macro = &m;
  Scope* closure = scope.get();
  macro_scopes_.push_back(scope);
  auto fn = std::make_shared<Function>();
  fn->name = m.name;
  fn->type_name = "Macro";
  fn->call = [macro, closure](Interpreter& in, CallArgs& args) { return in.call_macro(*macro, closure, args); };
  fn->repr = fmt::format("<Macro '{}'>", m.name);
  fn->attrs = std::make_shared<DictData>();
  std::vector<Value> names;
  for (const auto& p : m.params) names.push_back(Value::string(p.first));
  fn->attrs->set(Value::string("name"), Value::string(m.name));
  fn->attrs->set(Value::string("arguments"), Value::tuple(std::move(names)));
  fn->attrs->set(Value::string("catch_kwargs"), Value::boolean(m.catch_kwargs));
  fn->attrs->set(Value::string("catch_varargs"), Value::boolean(m.catch_varargs));
  fn->attrs->set(Value::string("caller"), Value::boolean(m.uses_caller));
  return Value::function(std::move(fn));
}

// Argument binding as jinja2's Macro.__call__: positional first, then keywords by name; extra
// positional arguments go to `varargs` and extra keywords to `kwargs` only if the body reads them.
Value Interpreter::call_macro(const MacroStmt& m, Scope* closure, CallArgs& args) {
  if (call_depth_ >= k_max_call_depth) throw Error("maximum recursion depth exceeded in macro calls");
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{++call_depth_};

  auto scope = std::make_shared<Scope>();
  scope->closure_parent = closure;
  size_t n_params = m.params.size();
  std::vector<std::optional<Value>> bound(n_params);
  for (size_t i = 0; i < n_params && i < args.args.size(); ++i) bound[i] = args.args[i];
  auto take_kwarg = [&](const std::string& name) -> std::optional<Value> {
    for (auto it = args.kwargs.begin(); it != args.kwargs.end(); ++it) {
      if (it->first == name) {
        Value v = std::move(it->second);
        args.kwargs.erase(it);
        return v;
      }
    }
    return std::nullopt;
  };
  bool caller_is_param = false;
  for (size_t i = args.args.size(); i < n_params; ++i) {
    bound[i] = take_kwarg(m.params[i].first);
    if (m.params[i].first == "caller") caller_is_param = true;
  }
  if (args.args.size() >= n_params)
    for (const auto& p : m.params)
      if (p.first == "caller") caller_is_param = true;
  if (m.uses_caller && !caller_is_param) {
    std::optional<Value> caller = take_kwarg("caller");
    scope->vars["caller"] = caller ? *caller : Value::undefined("No caller defined");
  }
  if (m.catch_kwargs) {
    auto d = std::make_shared<DictData>();
    for (auto& [k, v] : args.kwargs) d->set(Value::string(k), std::move(v));
    scope->vars["kwargs"] = Value::dict(std::move(d));
  } else if (!args.kwargs.empty()) {
    throw Error(fmt::format("macro '{}' takes no keyword argument '{}'", m.name, args.kwargs.front().first));
  }
  if (m.catch_varargs) {
    std::vector<Value> extra;
    for (size_t i = n_params; i < args.args.size(); ++i) extra.push_back(args.args[i]);
    scope->vars["varargs"] = Value::tuple(std::move(extra));
  } else if (args.args.size() > n_params) {
    throw Error(fmt::format("macro '{}' takes not more than {} argument(s)", m.name, n_params));
  }
  for (size_t i = 0; i < n_params; ++i) {
    const auto& [name, def] = m.params[i];
    if (bound[i])
      scope->vars[name] = std::move(*bound[i]);
    else if (def)
      scope->vars[name] = eval(*def, scope);
    else
      scope->vars[name] = Value::undefined(fmt::format("parameter '{}' was not provided", name));
  }
  std::string out;
  exec_body(m.body, scope, out);
  return Value::string(std::move(out));
}

Value Interpreter::apply_filter_chain(const Expr& chain, Value subject, const ScopePtr& scope) {
  const auto& f = static_cast<const FilterExpr&>(chain);
  Value v = f.subject ? apply_filter_chain(*f.subject, std::move(subject), scope) : std::move(subject);
  CallArgs args = eval_args(f.args, scope);
  return at_pos(f.pos, [&] { return apply_filter(f.name, v, args); });
}

// ---- expressions ------------------------------------------------------------------------------

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  return at_pos(e.pos, [&] { return eval_inner(e, scope); });
}

CallArgs Interpreter::eval_args(const ArgList& a, const ScopePtr& scope) {
  CallArgs out;
  for (const auto& x : a.args) out.args.push_back(eval(*x, scope));
  for (const auto& [k, x] : a.kwargs) out.kwargs.emplace_back(k, eval(*x, scope));
  if (a.dyn_args) {
    for (auto& v : eval(*a.dyn_args, scope).iterate()) out.args.push_back(std::move(v));
  }
  if (a.dyn_kwargs) {
    Value d = eval(*a.dyn_kwargs, scope);
    if (!d.is_dict()) throw Error(fmt::format("argument after ** must be a mapping, not {}", d.type_name()));
    for (const auto& [k, v] : d.dict_data().items) {
      if (!k.is_string()) throw Error("keywords must be strings");
      out.kwargs.emplace_back(k.as_string(), v);
    }
  }
  return out;
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::ExprKind_const:
      return static_cast<const ConstExpr&>(e).value;
    case ExprKind::ExprKind_name:
      return lookup(static_cast<const NameExpr&>(e).name, scope);
    case ExprKind::ExprKind_nsref:
      throw Error("namespace reference used as a value");
    case ExprKind::ExprKind_list:
    case ExprKind::ExprKind_tuple: {
      std::vector<Value> items;
      for (const auto& x : static_cast<const SeqExpr&>(e).items) items.push_back(eval(*x, scope));
      return Value::seq(std::move(items),
                        e.kind == ExprKind::ExprKind_list ? SeqKind::SeqKind_list : SeqKind::SeqKind_tuple);
    }
    case ExprKind::ExprKind_dict: {
      auto d = std::make_shared<DictData>();
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k, scope);
        d->set(std::move(key), eval(*v, scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::ExprKind_getattr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      return getattr(eval(*g.obj, scope), g.attr);
    }
    case ExprKind::ExprKind_getitem:
      return eval_subscript(static_cast<const GetItemExpr&>(e), scope);
    case ExprKind::ExprKind_slice:
      throw Error("slice outside of a subscript");
    case ExprKind::ExprKind_call: {
      const auto& c = static_cast<const CallExpr&>(e);
      Value callee = eval(*c.callee, scope);
      CallArgs args = eval_args(c.args, scope);
      return call(callee, args);
    }
    case ExprKind::ExprKind_filter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      Value subject = eval(*f.subject, scope);
      CallArgs args = eval_args(f.args, scope);
      return apply_filter(f.name, subject, args);
    }
    case ExprKind::ExprKind_test: {
      const auto& t = static_cast<const FilterExpr&>(e);
      Value subject = eval(*t.subject, scope);
      CallArgs args = eval_args(t.args, scope);
      return Value::boolean(apply_test(t.name, subject, args));
    }
    case ExprKind::ExprKind_unary: {
      const auto& u = static_cast<const UnaryExpr&>(e);
      return unary_op(u.op, eval(*u.operand, scope));
    }
    case ExprKind::ExprKind_binary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value left = eval(*b.left, scope);
      if (b.op == BinaryOp::BinaryOp_and) return left.truthy() ? eval(*b.right, scope) : left;
      if (b.op == BinaryOp::BinaryOp_or) return left.truthy() ? left : eval(*b.right, scope);
      return binary_op(b.op, left, eval(*b.right, scope));
    }
    case ExprKind::ExprKind_concat: {
      std::string out;
      for (const auto& x : static_cast<const ConcatExpr&>(e).items) out += eval(*x, scope).str();
      return Value::string(std::move(out));
    }
    case ExprKind::ExprKind_compare:
      return eval_compare(static_cast<const CompareExpr&>(e), scope);
    case ExprKind::ExprKind_condexpr: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (eval(*c.test, scope).truthy()) return eval(*c.then_expr, scope);
      if (c.else_expr) return eval(*c.else_expr, scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.pos.line));
    }
  }
  throw Error("internal error: unknown expression kind");
}

Value Interpreter::eval_subscript(const GetItemExpr& g, const ScopePtr& scope) {
  Value obj = eval(*g.obj, scope);
  if (g.key->kind == ExprKind::ExprKind_slice) {
    const auto& s = static_cast<const SliceExpr&>(*g.key);
    auto part = [&](const ExprPtr& x) -> std::optional<Value> {
      if (!x) return std::nullopt;
      return eval(*x, scope);
    };
    return slice(obj, part(s.start), part(s.stop), part(s.step));
  }
  return getitem(obj, eval(*g.key, scope));
}

Value Interpreter::eval_compare(const CompareExpr& c, const ScopePtr& scope) {
  Value left = eval(*c.first, scope);
  for (const auto& [op, rhs] : c.ops) {
    Value right = eval(*rhs, scope);
    if (!compare_op(op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

// ---- attribute and item access ----------------------------------------------------------------

namespace {

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", obj.object_type_repr(), name));
}

}  // namespace

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.throw_undefined();
  if (obj.is_object()) {
    if (auto v = obj.object_ref().get_attr(name)) return *v;
    return missing_attr(obj, name);
  }
  if (obj.is_function() && obj.function_ref().attrs) {
    if (const Value* v = obj.function_ref().attrs->get(name)) return *v;
  }
  if (auto m = find_method(obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().get(name)) return *v;
  }
  return missing_attr(obj, name);
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.throw_undefined();
  auto fallback = [&]() -> Value {
    if (key.is_string()) return getattr(obj, key.as_string());
    if (key.is_undefined()) return Value::undefined(fmt::format("{} has no element Undefined", obj.object_type_repr()));
    return Value::undefined(fmt::format("{} has no element {}", obj.object_type_repr(), key.repr()));
  };
  if (obj.is_dict()) {
    if (key.is_seq(SeqKind::SeqKind_list) || key.is_dict()) return fallback();  // unhashable: TypeError, caught
    ptrdiff_t i = obj.dict_data().find(key);
    if (i >= 0) return obj.dict_data().items[static_cast<size_t>(i)].second;
    return fallback();
  }
  bool indexable = obj.is_list_or_tuple() || obj.is_seq(SeqKind::SeqKind_range) || obj.is_string();
  if (indexable && key.is_integral()) {
    int64_t n = static_cast<int64_t>(obj.is_string() ? obj.len() : obj.seq_data().items.size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return fallback();
    if (obj.is_string()) {
      return slice(obj, Value::integer(i), Value::integer(i + 1), std::nullopt);
    }
    return obj.seq_data().items[static_cast<size_t>(i)];
  }
  return fallback();
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) callee.throw_undefined();
  if (!callee.is_function()) throw Error(fmt::format("'{}' object is not callable", callee.type_name()));
  return callee.function_ref().call(*this, args);
}

Value Interpreter::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) throw Error(fmt::format("unknown filter '{}'", name));
  return f(*this, subject, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) throw Error(fmt::format("unknown test '{}'", name));
  return t(*this, subject, args);
}

}  // namespace mla::jinja
