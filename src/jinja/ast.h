#pragma once
// The parsed template: expression and statement nodes, each with its source position. Nodes are
// plain structs tagged with a kind; the interpreter switches on the kind. Built once by the
// parser, then read-only, so one Template can render many contexts (also concurrently).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace mla::jinja {

struct Pos {
  int line = 0;
  int column = 0;
};

enum class ExprKind : uint8_t {
  ExprKind_const,
  ExprKind_name,
  ExprKind_nsref,  // ns.attr as an assignment target
  ExprKind_list,
  ExprKind_tuple,
  ExprKind_dict,
  ExprKind_getattr,
  ExprKind_getitem,
  ExprKind_slice,
  ExprKind_call,
  ExprKind_filter,
  ExprKind_test,
  ExprKind_unary,
  ExprKind_binary,
  ExprKind_concat,
  ExprKind_compare,
  ExprKind_condexpr,
};

struct Expr {
  explicit Expr(ExprKind k, Pos p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  Pos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(Pos p, Value v) : Expr(ExprKind::ExprKind_const, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(Pos p, std::string n) : Expr(ExprKind::ExprKind_name, p), name(std::move(n)) {}
  std::string name;
};

struct NsRefExpr : Expr {
  NsRefExpr(Pos p, std::string n, std::string a)
      : Expr(ExprKind::ExprKind_nsref, p), name(std::move(n)), attr(std::move(a)) {}
  std::string name, attr;
};

// list or tuple literal
struct SeqExpr : Expr {
  SeqExpr(ExprKind k, Pos p) : Expr(k, p) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(Pos p) : Expr(ExprKind::ExprKind_dict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(Pos p, ExprPtr o, std::string a)
      : Expr(ExprKind::ExprKind_getattr, p), obj(std::move(o)), attr(std::move(a)) {}
  ExprPtr obj;
  std::string attr;
};

struct GetItemExpr : Expr {
  GetItemExpr(Pos p, ExprPtr o, ExprPtr k)
      : Expr(ExprKind::ExprKind_getitem, p), obj(std::move(o)), key(std::move(k)) {}
  ExprPtr obj, key;
};

// [start:stop:step]; any part may be null
struct SliceExpr : Expr {
  explicit SliceExpr(Pos p) : Expr(ExprKind::ExprKind_slice, p) {}
  ExprPtr start, stop, step;
};

// Arguments of a call, filter or test: positional, keyword, *args, **kwargs.
struct ArgList {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
};

struct CallExpr : Expr {
  CallExpr(Pos p, ExprPtr c) : Expr(ExprKind::ExprKind_call, p), callee(std::move(c)) {}
  ExprPtr callee;
  ArgList args;
};

// subject | name(args); subject is null inside {% filter %} and {% set x | f %} blocks.
// Filters and tests are looked up by name when the template is parsed; an unknown one is an
// error then, unless inside an if-statement or conditional expression, where jinja2 defers the
// error to the moment it is evaluated.
struct FilterExpr : Expr {
  FilterExpr(ExprKind k, Pos p, ExprPtr s, std::string n) : Expr(k, p), subject(std::move(s)), name(std::move(n)) {}
  ExprPtr subject;
  std::string name;
  ArgList args;
  bool known = false;  // set by the parser's validation pass
};

enum class UnaryOp : uint8_t { UnaryOp_neg, UnaryOp_pos, UnaryOp_not };
struct UnaryExpr : Expr {
  UnaryExpr(Pos p, UnaryOp o, ExprPtr x) : Expr(ExprKind::ExprKind_unary, p), op(o), operand(std::move(x)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp : uint8_t {
  BinaryOp_add,
  BinaryOp_sub,
  BinaryOp_mul,
  BinaryOp_div,
  BinaryOp_floordiv,
  BinaryOp_mod,
  BinaryOp_pow,
  BinaryOp_and,
  BinaryOp_or,
};
struct BinaryExpr : Expr {
  BinaryExpr(Pos p, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::ExprKind_binary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(Pos p) : Expr(ExprKind::ExprKind_concat, p) {}
  std::vector<ExprPtr> items;
};

enum class CompareOp : uint8_t {
  CompareOp_eq,
  CompareOp_ne,
  CompareOp_lt,
  CompareOp_le,
  CompareOp_gt,
  CompareOp_ge,
  CompareOp_in,
  CompareOp_notin
};
struct CompareExpr : Expr {
  CompareExpr(Pos p, ExprPtr f) : Expr(ExprKind::ExprKind_compare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> ops;  // a < b < c: chained
};

// then_expr if test else else_expr (else may be null)
struct CondExpr : Expr {
  CondExpr(Pos p, ExprPtr t, ExprPtr a, ExprPtr b)
      : Expr(ExprKind::ExprKind_condexpr, p), test(std::move(t)), then_expr(std::move(a)), else_expr(std::move(b)) {}
  ExprPtr test, then_expr, else_expr;
};

// ---- statements -------------------------------------------------------------------------------

enum class StmtKind : uint8_t {
  StmtKind_output,
  StmtKind_if,
  StmtKind_for,
  StmtKind_set,
  StmtKind_set_block,
  StmtKind_macro,
  StmtKind_call_block,
  StmtKind_filter_block,
  StmtKind_with,
  StmtKind_scope,  // {% generation %}: body in its own scope
  StmtKind_break,
  StmtKind_continue,
};

struct Stmt {
  Stmt(StmtKind k, Pos p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  Pos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Template text and {{ }} expressions, in order. A piece with a null expr is text.
struct OutputStmt : Stmt {
  explicit OutputStmt(Pos p) : Stmt(StmtKind::StmtKind_output, p) {}
  struct Piece {
    std::string text;
    ExprPtr expr;
  };
  std::vector<Piece> pieces;
};

struct IfStmt : Stmt {
  explicit IfStmt(Pos p) : Stmt(StmtKind::StmtKind_if, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(Pos p) : Stmt(StmtKind::StmtKind_for, p) {}
  ExprPtr target;  // name or tuple of names
  ExprPtr iter;
  ExprPtr filter;  // for x in y if filter
  Body body, else_body;
};

struct SetStmt : Stmt {
  explicit SetStmt(Pos p) : Stmt(StmtKind::StmtKind_set, p) {}
  ExprPtr target;  // name, tuple of names, or ns.attr
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(Pos p) : Stmt(StmtKind::StmtKind_set_block, p) {}
  ExprPtr target;
  ExprPtr filter;  // FilterExpr chain with a null innermost subject, or null
  Body body;
};

struct MacroStmt : Stmt {
  MacroStmt(StmtKind k, Pos p) : Stmt(k, p) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
  bool catch_varargs = false, catch_kwargs = false, uses_caller = false;
};

// {% call(params) macro(args) %}body{% endcall %}: body becomes the macro's `caller`.
struct CallBlockStmt : MacroStmt {
  explicit CallBlockStmt(Pos p) : MacroStmt(StmtKind::StmtKind_call_block, p) {}
  ExprPtr call;  // CallExpr
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(Pos p) : Stmt(StmtKind::StmtKind_filter_block, p) {}
  ExprPtr filter;  // FilterExpr chain with a null innermost subject
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(Pos p) : Stmt(StmtKind::StmtKind_with, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;
  Body body;
};

struct ScopeStmt : Stmt {
  explicit ScopeStmt(Pos p) : Stmt(StmtKind::StmtKind_scope, p) {}
  Body body;
};

}  // namespace mla::jinja
