#pragma once
// Byte-level BPE on one pre-tokenized piece: start from one symbol per byte, then repeatedly
// merge the adjacent pair with the lowest merge rank (ties: the leftmost), exactly the order HF
// tokenizers' BPE model uses (a min-heap of (rank, position) with stale entries skipped).
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mla::tok {

using TokenId = int32_t;

// (left id, right id) → (rank, merged id); open addressing, power-of-two capacity.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    TokenId merged = -1;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n_pairs);
  // Keeps the first entry for a pair (the lowest rank when inserted in rank order).
  bool insert(TokenId left, TokenId right, int32_t rank, TokenId merged);
  const Entry* find(TokenId left, TokenId right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return n_; }

 private:
  static uint64_t pack(TokenId l, TokenId r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  void grow();

  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t n_ = 0;
};

// Reusable per-thread buffers for bpe_merge (no allocation once warm).
struct BpeScratch {
  struct Symbol {
    TokenId id;
    int32_t prev, next;  // -1: none
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    TokenId merged;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// Merges byte_ids (the token of each byte of the piece, in order; no -1 entries) and appends
// the resulting ids to out.
void bpe_merge(const MergeTable& merges, const TokenId* byte_ids, size_t n, BpeScratch& scratch,
               std::vector<TokenId>& out);

}  // namespace mla::tok
