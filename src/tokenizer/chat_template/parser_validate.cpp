// Compile-time checks jinja2 makes after parsing: an unknown filter or test is an error when the
// template is compiled, except inside an if-statement (its tests and bodies) or a conditional
// expression, where the error is deferred until the expression is evaluated. Nested scopes
// (for bodies, macro bodies, block-set bodies, filter and with blocks) are not "soft" again
// even inside an if, exactly as jinja2's compiler frames work.
#include <fmt/format.h>

#include "tokenizer/chat_template/ast.h"

namespace mla::jinja {
namespace {

void check_body(const Body& body, bool soft);

void check_args(const ArgList& a, bool soft);

void check(const Expr* e, bool soft) {
  if (!e) return;
  switch (e->kind) {
    case ExprKind::ExprKind_list:
    case ExprKind::ExprKind_tuple:
      for (const auto& x : static_cast<const SeqExpr&>(*e).items) check(x.get(), soft);
      return;
    case ExprKind::ExprKind_dict:
      for (const auto& [k, v] : static_cast<const DictExpr&>(*e).items) {
        check(k.get(), soft);
        check(v.get(), soft);
      }
      return;
    case ExprKind::ExprKind_getattr: check(static_cast<const GetAttrExpr&>(*e).obj.get(), soft); return;
    case ExprKind::ExprKind_getitem:
      check(static_cast<const GetItemExpr&>(*e).obj.get(), soft);
      check(static_cast<const GetItemExpr&>(*e).key.get(), soft);
      return;
    case ExprKind::ExprKind_slice: {
      const auto& s = static_cast<const SliceExpr&>(*e);
      check(s.start.get(), soft);
      check(s.stop.get(), soft);
      check(s.step.get(), soft);
      return;
    }
    case ExprKind::ExprKind_call:
      check(static_cast<const CallExpr&>(*e).callee.get(), soft);
      check_args(static_cast<const CallExpr&>(*e).args, soft);
      return;
    case ExprKind::ExprKind_filter:
    case ExprKind::ExprKind_test: {
      const auto& f = static_cast<const FilterExpr&>(*e);
      if (!f.known && !soft)
        throw Error(fmt::format("no {} named '{}'", e->kind == ExprKind::ExprKind_filter ? "filter" : "test", f.name),
                    e->pos.line, e->pos.column);
      check(f.subject.get(), soft);
      check_args(f.args, soft);
      return;
    }
    case ExprKind::ExprKind_unary: check(static_cast<const UnaryExpr&>(*e).operand.get(), soft); return;
    case ExprKind::ExprKind_binary:
      check(static_cast<const BinaryExpr&>(*e).left.get(), soft);
      check(static_cast<const BinaryExpr&>(*e).right.get(), soft);
      return;
    case ExprKind::ExprKind_concat:
      for (const auto& x : static_cast<const ConcatExpr&>(*e).items) check(x.get(), soft);
      return;
    case ExprKind::ExprKind_compare:
      check(static_cast<const CompareExpr&>(*e).first.get(), soft);
      for (const auto& kv : static_cast<const CompareExpr&>(*e).ops) check(kv.second.get(), soft);
      return;
    case ExprKind::ExprKind_condexpr: {
      const auto& c = static_cast<const CondExpr&>(*e);
      check(c.test.get(), true);
      check(c.then_expr.get(), true);
      check(c.else_expr.get(), true);
      return;
    }
    default: return;
  }
}

void check_args(const ArgList& a, bool soft) {
  for (const auto& x : a.args) check(x.get(), soft);
  for (const auto& kv : a.kwargs) check(kv.second.get(), soft);
  check(a.dyn_args.get(), soft);
  check(a.dyn_kwargs.get(), soft);
}

void check_macro(const MacroStmt& m) {
  for (const auto& p : m.params) check(p.second.get(), false);
  check_body(m.body, false);
}

void check_body(const Body& body, bool soft) {
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::StmtKind_output:
        for (const auto& piece : static_cast<const OutputStmt&>(*s).pieces) check(piece.expr.get(), soft);
        break;
      case StmtKind::StmtKind_if:
        for (const auto& [test, b] : static_cast<const IfStmt&>(*s).branches) {
          check(test.get(), true);
          check_body(b, true);
        }
        check_body(static_cast<const IfStmt&>(*s).else_body, true);
        break;
      case StmtKind::StmtKind_for: {
        const auto& f = static_cast<const ForStmt&>(*s);
        check(f.iter.get(), soft);
        check(f.filter.get(), false);
        check_body(f.body, false);
        check_body(f.else_body, false);
        break;
      }
      case StmtKind::StmtKind_set: check(static_cast<const SetStmt&>(*s).value.get(), soft); break;
      case StmtKind::StmtKind_set_block:
        check(static_cast<const SetBlockStmt&>(*s).filter.get(), false);
        check_body(static_cast<const SetBlockStmt&>(*s).body, false);
        break;
      case StmtKind::StmtKind_macro: check_macro(static_cast<const MacroStmt&>(*s)); break;
      case StmtKind::StmtKind_call_block:
        check(static_cast<const CallBlockStmt&>(*s).call.get(), soft);
        check_macro(static_cast<const MacroStmt&>(*s));
        break;
      case StmtKind::StmtKind_filter_block:
        check(static_cast<const FilterBlockStmt&>(*s).filter.get(), false);
        check_body(static_cast<const FilterBlockStmt&>(*s).body, false);
        break;
      case StmtKind::StmtKind_with:
        for (const auto& kv : static_cast<const WithStmt&>(*s).assignments) check(kv.second.get(), soft);
        check_body(static_cast<const WithStmt&>(*s).body, false);
        break;
      case StmtKind::StmtKind_scope: check_body(static_cast<const ScopeStmt&>(*s).body, false); break;
      default: break;
    }
  }
}

}  // namespace

void validate_filters(const Body& body) { check_body(body, false); }

}  // namespace mla::jinja
