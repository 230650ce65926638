#pragma once
// Renders a parsed template against a context, with jinja2's runtime semantics as configured by
// transformers for chat templates (ImmutableSandboxedEnvironment, default Undefined):
// - scopes: the template level sees the context and globals; each for-loop iteration, macro call,
//   block-set/filter/with/generation body gets a fresh child scope whose assignments do not leak
//   out; namespace() objects are the way to carry state out of loops;
// - undefined values print as "" and are falsy, but attribute access, calls and arithmetic on
//   them raise; a missing attribute or key gives an undefined value, not an error;
// - obj.name tries the Python attribute first, then obj["name"]; obj[key] the reverse;
// - mutating list/dict methods (append, pop, update, ...) are refused, as in the immutable sandbox.
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace mla::jinja {

struct RenderOptions {
  // The clock strftime_now() reads (local time). nullopt: the current time.
  std::optional<std::tm> now;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  Scope* closure_parent = nullptr;  // macro call scopes: the defining scope (owned elsewhere)
  std::unordered_map<std::string, Value> vars;
  const Value* find(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& opt);
  ~Interpreter();  // breaks reference cycles made during the render (see owned_)

  // context: a dict of template variables. root_undefined: names that start undefined at the
  // top level whatever the context says (parse.h: root_assigned_first). Throws jinja::Error
  // (with position when known).
  std::string render(const Body& body, const Value& context, const std::vector<std::string>& root_undefined = {});

  // Python/jinja2 operations the builtins also need.
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  const RenderOptions& options() const { return opt_; }
  // Mutable objects (namespaces) are the only way values can form reference cycles; the
  // interpreter owns them and empties them when the render ends.
  void own(std::shared_ptr<Object> mutable_object) { owned_.push_back(std::move(mutable_object)); }

 private:
  enum class Flow { Flow_normal, Flow_break, Flow_continue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_for(const ForStmt& s, const ScopePtr& scope, std::string& out);
  void assign(const Expr& target, Value v, const ScopePtr& scope);
  Value make_macro(const MacroStmt& m, const ScopePtr& scope);
  Value call_macro(const MacroStmt& m, Scope* closure, CallArgs& args);
  // Applies a filter chain whose innermost subject is null to `subject`.
  Value apply_filter_chain(const Expr& chain, Value subject, const ScopePtr& scope);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_subscript(const GetItemExpr& g, const ScopePtr& scope);  // obj[key] and obj[start:stop:step]
  Value eval_compare(const CompareExpr& c, const ScopePtr& scope);    // a < b <= c, Python's chaining
  CallArgs eval_args(const ArgList& a, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope) const;

  RenderOptions opt_;
  ScopePtr globals_;
  int call_depth_ = 0;
  // Scopes that macros close over. Macros hold plain pointers to them (a scope holding the
  // macro that holds the scope would be a cycle); they live until the render ends.
  std::vector<ScopePtr> macro_scopes_;
  std::vector<std::shared_ptr<Object>> owned_;
};

}  // namespace mla::jinja
