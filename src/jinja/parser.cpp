#include "jinja/parser.h"

#include <fmt/format.h>

#include <set>

#include "jinja/builtins.h"
#include "jinja/token_cursor.h"

namespace mla::jinja {
namespace {

constexpr int k_max_depth = 200;  // nesting of expressions/blocks; deeper input is an error, not a stack overflow

class Parser : TokenCursor {
 public:
  explicit Parser(const std::vector<Token>& tokens) : TokenCursor(tokens) {}

  Body parse_template() {
    Body body = subparse({});
    return body;
  }

 private:
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::pair<std::string, Pos>> tag_stack_;  // open tags, for end-of-template messages

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > k_max_depth) p.fail("template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // ---- statements -----------------------------------------------------------------------------

  // Parses until a block tag whose name is in end_tags (left as the current token) or the end.
  Body subparse(const std::vector<std::string_view>& end_tags) {
    DepthGuard guard(*this);
    Body body;
    OutputStmt* out = nullptr;
    auto output = [&]() -> OutputStmt& {
      if (!out) {
        auto o = std::make_unique<OutputStmt>(pos());
        out = o.get();
        body.push_back(std::move(o));
      }
      return *out;
    };
    while (cur().type != TokenType::TokenType_eof) {
      const Token& t = cur();
      if (t.type == TokenType::TokenType_data) {
        output().pieces.push_back({t.text, nullptr});
        next();
      } else if (t.type == TokenType::TokenType_var_begin) {
        next();
        ExprPtr e = parse_tuple(false, true, {}, false, false);
        expect(TokenType::TokenType_var_end, "'end of print statement'");
        output().pieces.push_back({"", std::move(e)});
      } else if (t.type == TokenType::TokenType_block_begin) {
        out = nullptr;
        next();
        if (cur().type == TokenType::TokenType_name)
          for (auto end : end_tags)
            if (cur().text == end) return body;
        StmtPtr s = parse_statement();
        if (s) body.push_back(std::move(s));
        expect(TokenType::TokenType_block_end, "'end of statement block'");
      } else {
        fail(fmt::format("unexpected '{}'", describe(t)));
      }
    }
    if (!end_tags.empty()) {
      std::string want;
      for (size_t k = 0; k < end_tags.size(); ++k) want += fmt::format("{}'{}'", k ? " or " : "", end_tags[k]);
      const auto& [tag, tag_pos] = tag_stack_.back();
      fail(fmt::format("unexpected end of template: expected {} to close the '{}' tag on line {}", want, tag,
                       tag_pos.line));
    }
    return body;
  }

  // After the tag's own tokens: "%}", then the body up to one of end_tags. With drop_needle the
  // end tag name is consumed (its "%}" is left for the caller).
  Body parse_statements(const std::vector<std::string_view>& end_tags, bool drop_needle) {
    skip_op(":");
    expect(TokenType::TokenType_block_end, "'end of statement block'");
    Body body = subparse(end_tags);
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::TokenType_name) fail("tag name expected");
    const std::string name = t.text;
    Pos p = pos();
    tag_stack_.emplace_back(name, p);
    StmtPtr s;
    if (name == "if") {
      s = parse_if();
    } else if (name == "for") {
      s = parse_for();
    } else if (name == "set") {
      s = parse_set();
    } else if (name == "macro") {
      s = parse_macro();
    } else if (name == "call") {
      s = parse_call_block();
    } else if (name == "filter") {
      s = parse_filter_block();
    } else if (name == "with") {
      s = parse_with();
    } else if (name == "print") {
      next();
      auto o = std::make_unique<OutputStmt>(p);
      while (cur().type != TokenType::TokenType_block_end) {
        if (!o->pieces.empty()) expect_op(",");
        o->pieces.push_back({"", parse_expression(true)});
      }
      s = std::move(o);
    } else if (name == "break" || name == "continue") {
      next();
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside loop", name), p);
      s = std::make_unique<Stmt>(name == "break" ? StmtKind::StmtKind_break : StmtKind::StmtKind_continue, p);
    } else if (name == "generation") {
      next();
      auto g = std::make_unique<ScopeStmt>(p);
      g->body = parse_statements({"endgeneration"}, true);
      s = std::move(g);
    } else if (name == "block" || name == "extends" || name == "include" || name == "import" || name == "from" ||
               name == "autoescape") {
      fail(fmt::format("the '{}' tag is not supported in chat templates", name), p);
    } else {
      std::string hint;
      if (!tag_stack_.empty() && tag_stack_.size() >= 2)
        hint = fmt::format(" (the innermost open tag is '{}' on line {})", tag_stack_[tag_stack_.size() - 2].first,
                           tag_stack_[tag_stack_.size() - 2].second.line);
      fail(fmt::format("unknown tag '{}'{}", name, hint), p);
    }
    tag_stack_.pop_back();
    return s;
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<IfStmt>(pos());
    next();  // if
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<ForStmt>(pos());
    next();  // for
    s->target = parse_assign_target(true, false, {"in"}, false);
    if (!skip_name("in")) unexpected("'in'");
    s->iter = parse_tuple(false, false, {"recursive"}, false, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail("recursive for-loops are not supported");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_set() {
    Pos p = pos();
    next();  // set
    ExprPtr target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(p);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false, false);
      return s;
    }
    auto s = std::make_unique<SetBlockStmt>(p);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(MacroStmt& m) {
    expect_op("(");
    bool seen_default = false;
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      const Token& t = expect(TokenType::TokenType_name, "parameter name");
      ExprPtr def;
      if (skip_op("=")) {
        def = parse_expression(true);
        seen_default = true;
      } else if (seen_default) {
        fail("non-default argument follows default argument", pos_of(t));
      }
      m.params.emplace_back(t.text, std::move(def));
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<MacroStmt>(StmtKind::StmtKind_macro, pos());
    next();  // macro
    s->name = expect(TokenType::TokenType_name, "macro name").text;
    parse_signature(*s);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    find_special_names(*s);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<CallBlockStmt>(pos());
    next();  // call
    if (is_op("(")) parse_signature(*s);
    s->call = parse_expression(true);
    if (s->call->kind != ExprKind::ExprKind_call) fail("expected call", s->pos);
    s->name = "caller";
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endcall"}, true);
    loop_depth_ = saved;
    find_special_names(*s);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<FilterBlockStmt>(pos());
    next();  // filter
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<WithStmt>(pos());
    next();  // with
    while (cur().type != TokenType::TokenType_block_end) {
      if (!s->assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(true, false, {}, false);
      expect_op("=");
      s->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // ---- expressions ----------------------------------------------------------------------------

  static bool can_assign(const Expr& e) {
    if (e.kind == ExprKind::ExprKind_name || e.kind == ExprKind::ExprKind_nsref) return true;
    if (e.kind == ExprKind::ExprKind_tuple) {
      for (const auto& x : static_cast<const SeqExpr&>(e).items)
        if (!can_assign(*x)) return false;
      return true;
    }
    return false;
  }

  ExprPtr parse_assign_target(bool with_tuple, bool name_only, const std::vector<std::string_view>& extra_end,
                              bool with_namespace) {
    ExprPtr target;
    if (name_only) {
      const Token& t = expect(TokenType::TokenType_name, "name");
      target = std::make_unique<NameExpr>(pos_of(t), t.text);
    } else if (with_tuple) {
      target = parse_tuple(true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    if (!can_assign(*target)) fail("can't assign to this expression", target->pos);
    return target;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this);
    Pos p = pos();
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      expr1 = std::make_unique<CondExpr>(p, std::move(expr2), std::move(expr1), std::move(expr3));
      p = pos();
    }
    return expr1;
  }

  ExprPtr parse_or() {
    Pos p = pos();
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      left = std::make_unique<BinaryExpr>(p, BinaryOp::BinaryOp_or, std::move(left), parse_and());
      p = pos();
    }
    return left;
  }

  ExprPtr parse_and() {
    Pos p = pos();
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      left = std::make_unique<BinaryExpr>(p, BinaryOp::BinaryOp_and, std::move(left), parse_not());
      p = pos();
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      Pos p = pos();
      next();
      return std::make_unique<UnaryExpr>(p, UnaryOp::UnaryOp_not, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    Pos p = pos();
    ExprPtr expr = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      CompareOp op;
      if (is_op("==")) {
        op = CompareOp::CompareOp_eq;
      } else if (is_op("!=")) {
        op = CompareOp::CompareOp_ne;
      } else if (is_op("<")) {
        op = CompareOp::CompareOp_lt;
      } else if (is_op("<=")) {
        op = CompareOp::CompareOp_le;
      } else if (is_op(">")) {
        op = CompareOp::CompareOp_gt;
      } else if (is_op(">=")) {
        op = CompareOp::CompareOp_ge;
      } else if (is_name("in")) {
        op = CompareOp::CompareOp_in;
      } else if (is_name("not") && peek().type == TokenType::TokenType_name && peek().text == "in") {
        next();
        op = CompareOp::CompareOp_notin;
      } else {
        break;
      }
      next();
      if (!cmp) cmp = std::make_unique<CompareExpr>(p, std::move(expr));
      cmp->ops.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return expr;
  }

  ExprPtr parse_math1() {
    Pos p = pos();
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      BinaryOp op = next().text == "+" ? BinaryOp::BinaryOp_add : BinaryOp::BinaryOp_sub;
      left = std::make_unique<BinaryExpr>(p, op, std::move(left), parse_concat());
      p = pos();
    }
    return left;
  }

  ExprPtr parse_concat() {
    Pos p = pos();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = std::make_unique<ConcatExpr>(p);
    c->items.push_back(std::move(first));
    while (skip_op("~")) c->items.push_back(parse_math2());
    return c;
  }

  ExprPtr parse_math2() {
    Pos p = pos();
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& t = next().text;
      BinaryOp op = t == "*"    ? BinaryOp::BinaryOp_mul
                    : t == "/"  ? BinaryOp::BinaryOp_div
                    : t == "//" ? BinaryOp::BinaryOp_floordiv
                                : BinaryOp::BinaryOp_mod;
      left = std::make_unique<BinaryExpr>(p, op, std::move(left), parse_pow());
      p = pos();
    }
    return left;
  }

  ExprPtr parse_pow() {
    Pos p = pos();
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      left = std::make_unique<BinaryExpr>(p, BinaryOp::BinaryOp_pow, std::move(left), parse_unary(true));
      p = pos();
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    Pos p = pos();
    ExprPtr node;
    if (skip_op("-")) {
      node = std::make_unique<UnaryExpr>(p, UnaryOp::UnaryOp_neg, parse_unary(false));
    } else if (skip_op("+")) {
      node = std::make_unique<UnaryExpr>(p, UnaryOp::UnaryOp_pos, parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    DepthGuard guard(*this);
    const Token& t = cur();
    Pos p = pos();
    switch (t.type) {
      case TokenType::TokenType_name: {
        next();
        if (t.text == "true" || t.text == "True") return std::make_unique<ConstExpr>(p, Value::boolean(true));
        if (t.text == "false" || t.text == "False") return std::make_unique<ConstExpr>(p, Value::boolean(false));
        if (t.text == "none" || t.text == "None") return std::make_unique<ConstExpr>(p, Value::none());
        if (with_namespace && is_op(".")) {
          next();
          const Token& attr = expect(TokenType::TokenType_name, "attribute name");
          return std::make_unique<NsRefExpr>(p, t.text, attr.text);
        }
        return std::make_unique<NameExpr>(p, t.text);
      }
      case TokenType::TokenType_string: {
        std::string s;
        while (cur().type == TokenType::TokenType_string) s += next().text;
        return std::make_unique<ConstExpr>(p, Value::string(std::move(s)));
      }
      case TokenType::TokenType_integer:
        next();
        return std::make_unique<ConstExpr>(p, Value::integer(t.int_value));
      case TokenType::TokenType_float:
        next();
        return std::make_unique<ConstExpr>(p, Value::floating(t.float_value));
      case TokenType::TokenType_op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, {}, true, false);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    if (t.type == TokenType::TokenType_eof) fail("unexpected end of template");
    fail(fmt::format("unexpected '{}'", describe(t)));
  }

  bool is_tuple_end(const std::vector<std::string_view>& extra_end) const {
    if (cur().type == TokenType::TokenType_var_end || cur().type == TokenType::TokenType_block_end || is_op(")"))
      return true;
    for (auto n : extra_end)
      if (is_name(n)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string_view>& extra_end,
                      bool explicit_parens, bool with_namespace) {
    Pos p = pos();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail(fmt::format("expected an expression, got '{}'", describe(cur())));
    }
    auto t = std::make_unique<SeqExpr>(ExprKind::ExprKind_tuple, p);
    t->items = std::move(args);
    return t;
  }

  ExprPtr parse_list() {
    auto l = std::make_unique<SeqExpr>(ExprKind::ExprKind_list, pos());
    expect_op("[");
    while (!is_op("]")) {
      if (!l->items.empty()) expect_op(",");
      if (is_op("]")) break;
      l->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return l;
  }

  ExprPtr parse_dict() {
    auto d = std::make_unique<DictExpr>(pos());
    expect_op("{");
    while (!is_op("}")) {
      if (!d->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      d->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return d;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("["))
        node = parse_subscript(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|"))
        node = parse_filter(std::move(node), false);
      else if (is_name("is"))
        node = parse_test(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    Pos p = pos_of(t);
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.type == TokenType::TokenType_name)
        return std::make_unique<GetAttrExpr>(pos_of(attr), std::move(node), attr.text);
      if (attr.type != TokenType::TokenType_integer) fail("expected name or number", pos_of(attr));
      return std::make_unique<GetItemExpr>(p, std::move(node),
                                           std::make_unique<ConstExpr>(pos_of(attr), Value::integer(attr.int_value)));
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1) return std::make_unique<GetItemExpr>(p, std::move(node), std::move(args[0]));
    auto tuple = std::make_unique<SeqExpr>(ExprKind::ExprKind_tuple, p);
    tuple->items = std::move(args);
    return std::make_unique<GetItemExpr>(p, std::move(node), std::move(tuple));
  }

  ExprPtr parse_subscribed() {
    Pos p = pos();
    auto slice = std::make_unique<SliceExpr>(p);
    if (is_op(":")) {
      next();
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      slice->start = std::move(e);
    }
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    return slice;
  }

  ArgList parse_call_args() {
    Pos p = pos();
    expect_op("(");
    ArgList a;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", p);
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!a.dyn_args && !a.dyn_kwargs);
        a.dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!a.dyn_kwargs);
        a.dyn_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::TokenType_name && peek().type == TokenType::TokenType_op &&
                 peek().text == "=") {
        ensure(!a.dyn_kwargs);
        std::string key = next().text;
        next();  // =
        a.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!a.dyn_args && !a.dyn_kwargs && a.kwargs.empty());
        a.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_call(ExprPtr node) {
    Pos p = node->pos;  // errors in a call point at what is called
    auto c = std::make_unique<CallExpr>(p, std::move(node));
    c->args = parse_call_args();
    return c;
  }

  std::string dotted_name() {
    std::string name = expect(TokenType::TokenType_name, "filter or test name").text;
    while (skip_op(".")) name += "." + expect(TokenType::TokenType_name, "name").text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      Pos p = pos();
      auto f = std::make_unique<FilterExpr>(ExprKind::ExprKind_filter, p, std::move(node), dotted_name());
      f->known = find_filter(f->name) != nullptr;
      if (is_op("(")) f->args = parse_call_args();
      node = std::move(f);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    Pos p = pos();
    next();  // is
    bool negated = skip_name("not");
    auto t = std::make_unique<FilterExpr>(ExprKind::ExprKind_test, p, std::move(node), dotted_name());
    t->known = find_test(t->name) != nullptr;
    const Token& c = cur();
    if (is_op("(")) {
      t->args = parse_call_args();
    } else if ((c.type == TokenType::TokenType_name || c.type == TokenType::TokenType_string ||
                c.type == TokenType::TokenType_integer || c.type == TokenType::TokenType_float || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      t->args.args.push_back(parse_postfix(parse_primary(false)));
    }
    if (negated) return std::make_unique<UnaryExpr>(p, UnaryOp::UnaryOp_not, std::move(t));
    return t;
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  Body body = Parser(tokens).parse_template();
  validate_filters(body);
  return body;
}

}  // namespace mla::jinja
