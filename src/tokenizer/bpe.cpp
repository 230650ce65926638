#include "tokenizer/bpe.h"

#include <algorithm>

namespace mla::tok {

void MergeTable::reserve(size_t n_pairs) {
  size_t cap = 16;
  while (cap < n_pairs * 2) cap <<= 1;  // load factor ≤ 1/2
  if (cap <= slots_.size()) return;
  std::vector<Entry> old = std::move(slots_);
  slots_.assign(cap, Entry{});
  mask_ = cap - 1;
  n_ = 0;
  for (const Entry& e : old)
    if (e.key != kEmpty) insert(static_cast<TokenId>(e.key >> 32), static_cast<TokenId>(e.key & 0xffffffffu), e.rank, e.merged);
}

void MergeTable::grow() { reserve(std::max<size_t>(16, n_ * 2 + 2)); }

bool MergeTable::insert(TokenId left, TokenId right, int32_t rank, TokenId merged) {
  if ((n_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key) return false;
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged};
      ++n_;
      return true;
    }
  }
}

namespace {

// Min-heap order on (rank, pos): std::push_heap builds a max-heap, so "less" means "later".
struct Later {
  bool operator()(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

void bpe_merge(const MergeTable& merges, const TokenId* byte_ids, size_t n, BpeScratch& scratch,
               std::vector<TokenId>& out) {
  if (n == 1) {
    out.push_back(byte_ids[0]);
    return;
  }
  auto& sym = scratch.symbols;
  auto& heap = scratch.heap;
  sym.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i)
    sym[i] = {byte_ids[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  for (size_t i = 0; i + 1 < n; ++i)
    if (const auto* m = merges.find(sym[i].id, sym[i + 1].id)) heap.push_back({m->rank, static_cast<int32_t>(i), m->merged});
  std::make_heap(heap.begin(), heap.end(), Later{});

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Later{});
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    BpeScratch::Symbol& right = sym[left.next];
    // Stale entry: the pair at this position no longer merges into the same token.
    const auto* m = merges.find(left.id, right.id);
    if (!m || m->merged != top.merged) continue;

    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;

    if (left.prev >= 0)
      if (const auto* mp = merges.find(sym[left.prev].id, left.id)) {
        heap.push_back({mp->rank, left.prev, mp->merged});
        std::push_heap(heap.begin(), heap.end(), Later{});
      }
    if (left.next >= 0)
      if (const auto* mn = merges.find(left.id, sym[left.next].id)) {
        heap.push_back({mn->rank, top.pos, mn->merged});
        std::push_heap(heap.begin(), heap.end(), Later{});
      }
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace mla::tok
