#pragma once
// Template globals (range, dict, namespace, cycler, joiner, and transformers' raise_exception
// and strftime_now) and the objects behind `loop` and namespace().
#include <memory>
#include <vector>

#include "jinja/interpreter.h"

namespace mla::jinja {

// The scope at the bottom of every render: builtin functions, shadowed by context variables.
ScopePtr make_globals();

// jinja2's LoopContext for a non-recursive loop over a materialised sequence.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  explicit LoopObject(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "LoopContext"; }
  std::optional<Value> get_attr(const std::string& name) override;
  std::string repr() const override;
  int64_t index0 = 0;

 private:
  std::vector<Value> items_;
  std::optional<std::vector<Value>> last_changed_;
};

// jinja2.utils.Namespace: attributes are set only through {% set ns.attr = ... %}.
class NamespaceObject : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::optional<Value> get_attr(const std::string& name) override;
  std::string repr() const override;
  bool is_namespace() const override { return true; }
  void set_attr(const std::string& name, Value v) override;
  void clear() override { attrs.items.clear(); }
  DictData attrs;
};

}  // namespace mla::jinja
