// KV cache manager: block tables per sequence over a pool of fixed-size blocks, with
// the prefix cache reusing full blocks across sequences.
//
// It hides the memory layout from the scheduler: the scheduler asks "can sequence s
// have room for n tokens?" and "which prefix is already cached?"; block ids only
// leave this class inside the block tables handed to the model runner.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "distllm/model/kv_cache.h"
#include "distllm/serve/block_pool.h"
#include "distllm/serve/prefix_cache.h"

namespace distllm::serve {

// Prefix cache counters. A query is one lookup when a request is admitted from the
// waiting queue (first admission and each re-admission after preemption).
struct PrefixCacheStats {
  int64_t query_tokens = 0;    // tokens looked up (the prompt, minus its last token)
  int64_t hit_tokens = 0;      // of those, tokens found cached (whole blocks)
  int64_t query_requests = 0;  // lookups
  int64_t hit_requests = 0;    // lookups that found at least one block
};

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_cache);

  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  bool prefix_cache_enabled() const { return cache_ != nullptr; }
  int blocks_for_tokens(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + block_size_ - 1) / block_size_);
  }

  // For a sequence that holds no blocks yet: finds the longest cached prefix of
  // `tokens` (whole blocks, and never the last token, which must run to produce
  // logits), gives the sequence those blocks (pinning them), and returns the number
  // of tokens covered. Returns 0 when the cache is off.
  int acquire_cached_prefix(uint64_t seq_id, std::span<const int32_t> tokens);
  // Counts one prefix-cache query; the scheduler calls it when a lookup led to an
  // admission (a lookup undone because the request did not fit is not counted).
  void record_prefix_query(int64_t query_tokens, int64_t hit_tokens);

  // Grows the sequence's block table to cover `num_tokens` positions, evicting
  // cached-only blocks if the pool runs short. All or nothing: returns false and
  // changes nothing the sequence holds when there is not enough room.
  bool allocate_slots(uint64_t seq_id, int64_t num_tokens);

  // Offers the sequence's full blocks of computed tokens (tokens[0, num_computed))
  // to the prefix cache. No-op when the cache is off.
  void cache_computed(uint64_t seq_id, std::span<const int32_t> tokens, int64_t num_computed);

  // KV transfer (prefill/decode disaggregation). Blocks of the longest cached prefix
  // of `tokens` (whole blocks), not pinned: valid until the next allocation or eviction.
  std::vector<int32_t> cached_prefix_blocks(std::span<const int32_t> tokens);
  // Makes the first `num_blocks` full blocks of `tokens` cached: blocks already in
  // the prefix cache are kept, each missing one gets a free block (evicting idle
  // cached ones if needed) that `write(i, block)` fills with the K/V of block i, and
  // the run is inserted into the prefix cache (which then holds it alone). Stops at
  // the first block there is no room for. Returns how many leading blocks of
  // `tokens` are cached afterwards. Returns 0 when the cache is off.
  int import_prefix(std::span<const int32_t> tokens, int num_blocks,
                    const std::function<void(int index, int32_t block)>& write);

  // Drops every block the sequence holds (cached ones stay in the prefix cache).
  void free(uint64_t seq_id);

  // Sliding-window models (every layer windowed: ModelConfig::kv_window): a query
  // at position p reads keys from p + 1 - window on. 0 (the default): nothing is
  // released.
  void set_sliding_window(int window);
  int sliding_window() const { return window_; }
  // Gives back the sequence's blocks that lie wholly before the window of its next
  // query (at position `next_position`; later queries see later keys), leaving
  // kReleasedKvBlock in its table. Blocks already offered to the prefix cache stay
  // in it (evictable once nobody else holds them). Returns how many were released.
  int release_outside_window(uint64_t seq_id, int64_t next_position);

  const std::vector<int32_t>& block_table(uint64_t seq_id) const;
  bool has_sequence(uint64_t seq_id) const { return tables_.count(seq_id) != 0; }
  size_t num_sequences() const { return tables_.size(); }

  int num_free_blocks() const { return pool_.num_free(); }
  int num_cached_blocks() const { return pool_.num_cached(); }
  // Blocks referenced by some sequence.
  int num_active_blocks() const { return pool_.num_active(); }
  // Free plus blocks the prefix cache could evict right now.
  int num_available_blocks() const { return pool_.num_free() + pool_.num_evictable(); }
  // Fraction of blocks held by sequences, 0..1 (vLLM's kv_cache_usage_perc).
  double usage() const { return static_cast<double>(pool_.num_active()) / pool_.num_blocks(); }

  const PrefixCacheStats& prefix_stats() const { return stats_; }
  // Empties the prefix cache (blocks held by sequences stay allocated).
  void reset_prefix_cache();

  // Recounts every reference from the block tables and the prefix cache and
  // compares with the pool; throws on a mismatch. For tests.
  void check_invariants() const;
  const BlockPool& pool() const { return pool_; }

 private:
  int block_size_;
  BlockPool pool_;
  std::unique_ptr<PrefixCache> cache_;  // declared after pool_: destroyed first
  struct SeqBlocks {
    std::vector<int32_t> table;
    size_t offered = 0;   // leading blocks already offered to the prefix cache
    size_t released = 0;  // leading blocks given back (kReleasedKvBlock in the table)
  };
  std::unordered_map<uint64_t, SeqBlocks> tables_;
  PrefixCacheStats stats_;
  int window_ = 0;
};

}  // namespace distllm::serve
