#pragma once
// An LRU map under a byte budget: entries keyed by Key, each with its size in bytes, in order of
// last use. The tier store's three caches (host blocks, disk files, read-ahead blocks) are each
// one of these; the caller decides when to touch, and evicts to a budget.
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace mla::kv {

template <class Key, class Value>
class ByteLru {
 public:
  bool contains(const Key& k) const { return map_.count(k) != 0; }
  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  int64_t bytes() const { return bytes_; }  // the sum of the entries' sizes

  // nullptr when absent; the order of use is not changed (see touch).
  const Value* find(const Key& k) const {
    auto it = map_.find(k);
    return it == map_.end() ? nullptr : &it->second.value;
  }
  // Makes k the most recently used entry (no effect when absent).
  void touch(const Key& k) {
    if (auto it = map_.find(k); it != map_.end()) order_.splice(order_.end(), order_, it->second.pos);
  }
  // Adds k as the most recently used entry; false (and nothing changed) when k is already held.
  bool insert(const Key& k, Value v, int64_t n_bytes) {
    if (map_.count(k)) return false;
    order_.push_back(k);
    map_.emplace(k, Entry{std::move(v), n_bytes, std::prev(order_.end())});
    bytes_ += n_bytes;
    return true;
  }
  // Removes k, returning its value (nullopt when absent).
  std::optional<Value> erase(const Key& k) {
    auto it = map_.find(k);
    if (it == map_.end()) return std::nullopt;
    std::optional<Value> v(std::move(it->second.value));
    remove(it);
    return v;
  }
  // Removes least recently used entries until bytes() <= budget, calling on_evict(key, value)
  // for each.
  template <class F>
  void evict_to(int64_t budget, F&& on_evict) {
    while (bytes_ > budget && !order_.empty()) {
      auto it = map_.find(order_.front());
      const Key k = it->first;
      Value v = std::move(it->second.value);
      remove(it);
      on_evict(k, v);
    }
  }
  void evict_to(int64_t budget) {
    evict_to(budget, [](const Key&, const Value&) {});
  }

 private:
  struct Entry {
    Value value;
    int64_t n_bytes = 0;
    typename std::list<Key>::iterator pos;
  };
  void remove(typename std::unordered_map<Key, Entry>::iterator it) {
    bytes_ -= it->second.n_bytes;
    order_.erase(it->second.pos);
    map_.erase(it);
  }
  std::list<Key> order_;  // front: least recently used
  std::unordered_map<Key, Entry> map_;
  int64_t bytes_ = 0;
};

}  // namespace mla::kv
