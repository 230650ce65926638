#include "jinja/globals.h"

#include <fmt/format.h>

#include <ctime>

#include "jinja/builtins.h"

namespace mla::jinja {
namespace {

constexpr int64_t k_max_range = 100000;  // jinja2.sandbox.MAX_RANGE

// dict(*args, **kwargs) semantics shared by dict() and namespace().
std::shared_ptr<DictData> dict_from_args(std::string_view fn, CallArgs& args) {
  auto d = std::make_shared<DictData>();
  if (args.args.size() > 1) throw Error(fmt::format("{} expected at most 1 argument, got {}", fn, args.args.size()));
  if (args.args.size() == 1) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict_data().items) d->set(k, v);
    } else {
      for (const auto& pair : src.iterate()) {
        std::vector<Value> kv = pair.iterate();
        if (kv.size() != 2)
          throw Error(fmt::format("dictionary update sequence element has length {}; 2 is required", kv.size()));
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kwargs) d->set(Value::string(k), std::move(v));
  return d;
}

int64_t range_arg(const Value& v) {
  if (v.is_undefined()) v.throw_undefined();
  if (!v.is_integral()) throw Error(fmt::format("'{}' object cannot be interpreted as an integer", v.type_name()));
  return v.as_int();
}

Value make_range(Interpreter&, CallArgs& args) {
  if (!args.kwargs.empty()) throw Error("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    throw Error(fmt::format("range expected 1 to 3 arguments, got {}", args.args.size()));
  int64_t start = 0, stop, step = 1;
  if (args.args.size() == 1) {
    stop = range_arg(args.args[0]);
  } else {
    start = range_arg(args.args[0]);
    stop = range_arg(args.args[1]);
    if (args.args.size() == 3) step = range_arg(args.args[2]);
  }
  if (step == 0) throw Error("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= k_max_range)
      throw Error(fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", k_max_range));
    items.push_back(Value::integer(i));
  }
  Value r = Value::seq(std::move(items), SeqKind::SeqKind_range);
  r.seq_data().range_start = start;
  r.seq_data().range_stop = stop;
  r.seq_data().range_step = step;
  return r;
}

class CyclerObject : public Object, public std::enable_shared_from_this<CyclerObject> {
 public:
  explicit CyclerObject(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::string repr() const override { throw Error("cannot convert a Cycler to text"); }
  std::optional<Value> get_attr(const std::string& name) override {
    if (name == "current") return items_[pos_];
    if (name == "next")
      return Value::function("cycler.next", "method", [self = shared_from_this()](Interpreter&, CallArgs& a) {
        bind_args("next", a, {});
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    if (name == "reset")
      return Value::function("cycler.reset", "method", [self = shared_from_this()](Interpreter&, CallArgs& a) {
        bind_args("reset", a, {});
        self->pos_ = 0;
        return Value::none();
      });
    return std::nullopt;
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

std::string format_time(const std::string& fmt, const std::tm& tm) {
  if (fmt.empty()) return "";
  std::vector<char> buf(256 + fmt.size() * 8);
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  if (n == 0) {
    buf.resize(65536);
    n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  }
  return std::string(buf.data(), n);
}

}  // namespace

std::optional<Value> LoopObject::get_attr(const std::string& name) {
  int64_t length = static_cast<int64_t>(items_.size());
  if (name == "index") return Value::integer(index0 + 1);
  if (name == "index0") return Value::integer(index0);
  if (name == "revindex") return Value::integer(length - index0);
  if (name == "revindex0") return Value::integer(length - index0 - 1);
  if (name == "first") return Value::boolean(index0 == 0);
  if (name == "last") return Value::boolean(index0 == length - 1);
  if (name == "length") return Value::integer(length);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem")
    return index0 > 0 ? items_[static_cast<size_t>(index0 - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return index0 + 1 < length ? items_[static_cast<size_t>(index0 + 1)] : Value::undefined("there is no next item");
  if (name == "cycle")
    return Value::function("loop.cycle", "method", [self = shared_from_this()](Interpreter&, CallArgs& a) {
      if (!a.kwargs.empty()) throw Error("cycle() takes no keyword arguments");
      if (a.args.empty()) throw Error("no items for cycling given");
      return a.args[static_cast<size_t>(self->index0) % a.args.size()];
    });
  if (name == "changed")
    return Value::function("loop.changed", "method", [self = shared_from_this()](Interpreter&, CallArgs& a) {
      if (!a.kwargs.empty()) throw Error("changed() takes no keyword arguments");
      auto& last = self->last_changed_;
      if (last && last->size() == a.args.size()) {
        bool same = true;
        for (size_t i = 0; i < a.args.size(); ++i) same = same && py_eq((*last)[i], a.args[i]);
        if (same) return Value::boolean(false);
      }
      last = a.args;
      return Value::boolean(true);
    });
  return std::nullopt;
}

std::string LoopObject::repr() const { return fmt::format("<LoopContext {}/{}>", index0 + 1, items_.size()); }

std::optional<Value> NamespaceObject::get_attr(const std::string& name) {
  if (const Value* v = attrs.get(name)) return *v;
  return std::nullopt;
}

std::string NamespaceObject::repr() const {
  auto d = std::make_shared<DictData>(attrs);
  return "<Namespace " + Value::dict(d).repr() + ">";
}

void NamespaceObject::set_attr(const std::string& name, Value v) { attrs.set(Value::string(name), std::move(v)); }

ScopePtr make_globals() {
  auto g = std::make_shared<Scope>();
  // repr: what jinja2 prints for the global itself; empty when that includes a memory address.
  auto add = [&](const char* name, std::function<Value(Interpreter&, CallArgs&)> fn, const char* repr = "") {
    auto f = std::make_shared<Function>();
    f->name = name;
    f->type_name = "builtin_function_or_method";
    f->call = std::move(fn);
    f->repr = repr;
    g->vars[name] = Value::function(std::move(f));
  };
  add("range", make_range);
  add(
      "dict", [](Interpreter&, CallArgs& a) { return Value::dict(dict_from_args("dict", a)); }, "<class 'dict'>");
  add(
      "namespace",
      [](Interpreter& in, CallArgs& a) {
        auto ns = std::make_shared<NamespaceObject>();
        ns->attrs = *dict_from_args("namespace", a);
        in.own(ns);
        return Value::object(std::move(ns));
      },
      "<class 'jinja2.utils.Namespace'>");
  add(
      "cycler",
      [](Interpreter&, CallArgs& a) {
        if (!a.kwargs.empty()) throw Error("cycler() takes no keyword arguments");
        if (a.args.empty()) throw Error("at least one item has to be provided");
        return Value::object(std::make_shared<CyclerObject>(a.args));
      },
      "<class 'jinja2.utils.Cycler'>");
  add(
      "joiner",
      [](Interpreter&, CallArgs& a) {
        auto v = bind_args("joiner", a, {{"sep", Value::string(", ")}});
        auto used = std::make_shared<bool>(false);
        std::string sep = v[0].str();
        return Value::function("joiner", "Joiner", [used, sep](Interpreter&, CallArgs& b) {
          bind_args("joiner", b, {});
          if (!*used) {
            *used = true;
            return Value::string("");
          }
          return Value::string(sep);
        });
      },
      "<class 'jinja2.utils.Joiner'>");
  add("lipsum", [](Interpreter&, CallArgs&) -> Value { throw Error("lipsum() is not supported by mla.cpp"); });
  // transformers' chat-template globals
  add("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
    auto v = bind_args("raise_exception", a, {{"message", std::nullopt}});
    throw Error(v[0].str());
  });
  add("strftime_now", [](Interpreter& in, CallArgs& a) {
    auto v = bind_args("strftime_now", a, {{"format", std::nullopt}});
    if (!v[0].is_string()) throw Error(fmt::format("strftime() argument 1 must be str, not {}", v[0].type_name()));
    std::tm tm{};
    if (in.options().now) {
      tm = *in.options().now;
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    return Value::string(format_time(v[0].as_string(), tm));
  });
  return g;
}

}  // namespace mla::jinja
