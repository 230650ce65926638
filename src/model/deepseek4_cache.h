#pragma once
// What a DeepSeek-V4 sequence keeps between forward calls, per layer (docs/DEEPSEEK-V4.md §1.3-1.5):
// the last W - 1 raw K=V rows (the sliding window; older raw rows are never read again), and for
// compressed layers the compressed entries so far plus the compressor's carry-over — the tokens of
// the window still open, and for CSA the previous window's series A that the next entry pools.
// CSA layers keep the same for the indexer's keys. One store per sequence, not paged: the engine's
// runner (engine/deepseek4_runner.h) keeps one per running sequence, and its block pool only
// accounts their memory (deepseek4_state_bound in model/deepseek4.h).
#include <cstdint>
#include <vector>

namespace mla {

// One compressor's state: entries [n_entries][dim] (normed and rotated, final); the open
// window's projected rows (kv and gate with the position bias added) [n_open][width]; for CSA
// the last closed window's series A, kv and gate [m][dim] (empty before the first window closes).
struct Ds4CompressorState {
  std::vector<float> entries;
  int64_t n_entries = 0;
  std::vector<float> open_kv, open_gate;
  int64_t n_open = 0;
  std::vector<float> prev_kv, prev_gate;
};

struct Ds4LayerCache {
  std::vector<float> window;  // [n_window_rows][head_dim]: raw rows of positions first_window_pos..
  int64_t first_window_pos = 0;
  Ds4CompressorState attn;     // CSA / HCA layers
  Ds4CompressorState indexer;  // CSA layers, at indexer_head_dim
};

struct Deepseek4Cache {
  int64_t n_past = 0;  // tokens already run: the next token's position
  std::vector<Ds4LayerCache> layers;
};

}  // namespace mla
