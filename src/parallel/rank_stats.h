#pragma once
// What one rank holds and has moved, gathered by rank 0 for `mla bench` (docs/SCALING.md): the
// resident memory of the process (the file-backed part is the model pages it touched: about
// its shard) and the bytes through the communicator.
#include <cstdint>
#include <string>

namespace mla {

struct RankStats {
  int64_t rss_bytes = 0;        // VmRSS
  int64_t rss_file_bytes = 0;   // RssFile: mapped file pages resident (the weights it read)
  int64_t rss_anon_bytes = 0;   // RssAnon: heap (cache, activations, F32 W_UK/W_UV)
  int64_t model_rss_bytes = 0;  // resident pages of the model file's mapping (the weights this rank touched)
  int64_t comm_sent_bytes = 0;
  int64_t comm_received_bytes = 0;
  int64_t comm_messages = 0;
  int64_t expert_bytes = 0;       // routed-expert weight bytes its MoE layers read (MoeCounters)
  int64_t shard_bytes = 0;        // model file bytes this rank reads by its share (map_rank_shard), all but token_embd
  int64_t shard_split_bytes = 0;  // of which its share of the split tensors
  int64_t expert_begin = 0, expert_end = 0;
  int64_t head_begin = 0, head_end = 0;
};

// This process's resident set from /proc/self/status, and the resident part of its mappings of
// model_path from /proc/self/smaps (zeros where they cannot be read).
void read_resident_memory(RankStats& s, const std::string& model_path);

}  // namespace mla
