// Post-parse passes. validate_filters: the compile-time check jinja2 makes: an unknown filter or test is an error when
// the template is compiled, except inside an if-statement (its tests and bodies) or a conditional expression, where the
// error is deferred until the expression is evaluated. Nested scopes (for bodies, macro bodies, block-set bodies,
// filter and with blocks) are not "soft" again even inside an if, exactly as jinja2's compiler frames work.
#include <fmt/format.h>

#include <functional>
#include <set>

#include "jinja/parser.h"

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
    case ExprKind::ExprKind_getattr:
      check(static_cast<const GetAttrExpr&>(*e).obj.get(), soft);
      return;
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
        throw Error(fmt::format("unknown {} '{}'", e->kind == ExprKind::ExprKind_filter ? "filter" : "test", f.name),
                    e->pos.line, e->pos.column);
      check(f.subject.get(), soft);
      check_args(f.args, soft);
      return;
    }
    case ExprKind::ExprKind_unary:
      check(static_cast<const UnaryExpr&>(*e).operand.get(), soft);
      return;
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
    default:
      return;
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
      case StmtKind::StmtKind_set:
        check(static_cast<const SetStmt&>(*s).value.get(), soft);
        break;
      case StmtKind::StmtKind_set_block:
        check(static_cast<const SetBlockStmt&>(*s).filter.get(), false);
        check_body(static_cast<const SetBlockStmt&>(*s).body, false);
        break;
      case StmtKind::StmtKind_macro:
        check_macro(static_cast<const MacroStmt&>(*s));
        break;
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
      case StmtKind::StmtKind_scope:
        check_body(static_cast<const ScopeStmt&>(*s).body, false);
        break;
      default:
        break;
    }
  }
}

// Calls f(name) for every variable the expression reads.
void visit_names(const Expr* e, const std::function<void(const std::string&)>& f) {
  if (!e) return;
  switch (e->kind) {
    case ExprKind::ExprKind_name:
      f(static_cast<const NameExpr&>(*e).name);
      return;
    case ExprKind::ExprKind_nsref:
      f(static_cast<const NsRefExpr&>(*e).name);
      return;
    case ExprKind::ExprKind_list:
    case ExprKind::ExprKind_tuple:
      for (const auto& x : static_cast<const SeqExpr&>(*e).items) visit_names(x.get(), f);
      return;
    case ExprKind::ExprKind_dict:
      for (const auto& [k, v] : static_cast<const DictExpr&>(*e).items) {
        visit_names(k.get(), f);
        visit_names(v.get(), f);
      }
      return;
    case ExprKind::ExprKind_getattr:
      visit_names(static_cast<const GetAttrExpr&>(*e).obj.get(), f);
      return;
    case ExprKind::ExprKind_getitem:
      visit_names(static_cast<const GetItemExpr&>(*e).obj.get(), f);
      visit_names(static_cast<const GetItemExpr&>(*e).key.get(), f);
      return;
    case ExprKind::ExprKind_slice: {
      const auto& s = static_cast<const SliceExpr&>(*e);
      visit_names(s.start.get(), f);
      visit_names(s.stop.get(), f);
      visit_names(s.step.get(), f);
      return;
    }
    case ExprKind::ExprKind_call:
    case ExprKind::ExprKind_filter:
    case ExprKind::ExprKind_test: {
      const ArgList* a;
      if (e->kind == ExprKind::ExprKind_call) {
        visit_names(static_cast<const CallExpr&>(*e).callee.get(), f);
        a = &static_cast<const CallExpr&>(*e).args;
      } else {
        visit_names(static_cast<const FilterExpr&>(*e).subject.get(), f);
        a = &static_cast<const FilterExpr&>(*e).args;
      }
      for (const auto& x : a->args) visit_names(x.get(), f);
      for (const auto& kv : a->kwargs) visit_names(kv.second.get(), f);
      visit_names(a->dyn_args.get(), f);
      visit_names(a->dyn_kwargs.get(), f);
      return;
    }
    case ExprKind::ExprKind_unary:
      visit_names(static_cast<const UnaryExpr&>(*e).operand.get(), f);
      return;
    case ExprKind::ExprKind_binary:
      visit_names(static_cast<const BinaryExpr&>(*e).left.get(), f);
      visit_names(static_cast<const BinaryExpr&>(*e).right.get(), f);
      return;
    case ExprKind::ExprKind_concat:
      for (const auto& x : static_cast<const ConcatExpr&>(*e).items) visit_names(x.get(), f);
      return;
    case ExprKind::ExprKind_compare:
      visit_names(static_cast<const CompareExpr&>(*e).first.get(), f);
      for (const auto& kv : static_cast<const CompareExpr&>(*e).ops) visit_names(kv.second.get(), f);
      return;
    case ExprKind::ExprKind_condexpr: {
      const auto& c = static_cast<const CondExpr&>(*e);
      visit_names(c.test.get(), f);
      visit_names(c.then_expr.get(), f);
      visit_names(c.else_expr.get(), f);
      return;
    }
    default:
      return;
  }
}

void scan_names(const Expr* e, MacroStmt& m) {
  visit_names(e, [&m](const std::string& n) {
    if (n == "varargs") m.catch_varargs = true;
    if (n == "kwargs") m.catch_kwargs = true;
    if (n == "caller") m.uses_caller = true;
  });
}

// jinja2 decides, per frame, how a variable starts: a name whose first reference at the top
// level of the template is an unconditional assignment starts undefined there (it is not looked
// up in the context), so macros and loops that read it before the assignment runs see undefined.
// Names first referenced inside an if-branch, or read first, come from the context.
struct RootNames {
  std::set<std::string> seen;
  std::vector<std::string> assigned_first;

  void load(const Expr* e) {
    visit_names(e, [this](const std::string& n) { seen.insert(n); });
  }
  void store(const std::string& n, bool conditional) {
    if (seen.insert(n).second && !conditional) assigned_first.push_back(n);
  }
  void store_target(const Expr& t, bool conditional) {
    if (t.kind == ExprKind::ExprKind_name) store(static_cast<const NameExpr&>(t).name, conditional);
    if (t.kind == ExprKind::ExprKind_nsref) seen.insert(static_cast<const NsRefExpr&>(t).name);
    if (t.kind == ExprKind::ExprKind_tuple)
      for (const auto& x : static_cast<const SeqExpr&>(t).items) store_target(*x, conditional);
  }
  void walk(const Body& body, bool conditional) {
    for (const auto& s : body) {
      switch (s->kind) {
        case StmtKind::StmtKind_output:
          for (const auto& piece : static_cast<const OutputStmt&>(*s).pieces) load(piece.expr.get());
          break;
        case StmtKind::StmtKind_if: {
          const auto& st = static_cast<const IfStmt&>(*s);
          for (const auto& [test, b] : st.branches) {
            load(test.get());
            walk(b, true);
          }
          walk(st.else_body, true);
          break;
        }
        case StmtKind::StmtKind_for:
          load(static_cast<const ForStmt&>(*s).iter.get());
          break;
        case StmtKind::StmtKind_set: {
          const auto& st = static_cast<const SetStmt&>(*s);
          load(st.value.get());
          store_target(*st.target, conditional);
          break;
        }
        case StmtKind::StmtKind_set_block:
          store_target(*static_cast<const SetBlockStmt&>(*s).target, conditional);
          break;
        case StmtKind::StmtKind_macro:
          store(static_cast<const MacroStmt&>(*s).name, conditional);
          break;
        case StmtKind::StmtKind_call_block:
          load(static_cast<const CallBlockStmt&>(*s).call.get());
          break;
        case StmtKind::StmtKind_filter_block:
          load(static_cast<const FilterBlockStmt&>(*s).filter.get());
          break;
        case StmtKind::StmtKind_with:
          for (const auto& kv : static_cast<const WithStmt&>(*s).assignments) load(kv.second.get());
          break;
        default:
          break;
      }
    }
  }
};

void scan_body(const Body& body, MacroStmt& m) {
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::StmtKind_output:
        for (const auto& piece : static_cast<const OutputStmt&>(*s).pieces) scan_names(piece.expr.get(), m);
        break;
      case StmtKind::StmtKind_if:
        for (const auto& [test, b] : static_cast<const IfStmt&>(*s).branches) {
          scan_names(test.get(), m);
          scan_body(b, m);
        }
        scan_body(static_cast<const IfStmt&>(*s).else_body, m);
        break;
      case StmtKind::StmtKind_for: {
        const auto& f = static_cast<const ForStmt&>(*s);
        scan_names(f.iter.get(), m);
        scan_names(f.filter.get(), m);
        scan_body(f.body, m);
        scan_body(f.else_body, m);
        break;
      }
      case StmtKind::StmtKind_set:
        scan_names(static_cast<const SetStmt&>(*s).value.get(), m);
        break;
      case StmtKind::StmtKind_set_block:
        scan_names(static_cast<const SetBlockStmt&>(*s).filter.get(), m);
        scan_body(static_cast<const SetBlockStmt&>(*s).body, m);
        break;
      case StmtKind::StmtKind_call_block:
        scan_names(static_cast<const CallBlockStmt&>(*s).call.get(), m);
        break;
      case StmtKind::StmtKind_filter_block:
        scan_names(static_cast<const FilterBlockStmt&>(*s).filter.get(), m);
        scan_body(static_cast<const FilterBlockStmt&>(*s).body, m);
        break;
      case StmtKind::StmtKind_with:
        for (const auto& kv : static_cast<const WithStmt&>(*s).assignments) scan_names(kv.second.get(), m);
        scan_body(static_cast<const WithStmt&>(*s).body, m);
        break;
      case StmtKind::StmtKind_scope:
        scan_body(static_cast<const ScopeStmt&>(*s).body, m);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void validate_filters(const Body& body) { check_body(body, false); }

void find_special_names(MacroStmt& m) { scan_body(m.body, m); }

std::vector<std::string> root_assigned_first(const Body& body) {
  RootNames r;
  r.walk(body, false);
  return r.assigned_first;
}

}  // namespace mla::jinja
