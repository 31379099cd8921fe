// A pool of fixed-size KV blocks with reference counts.
//
// Owners of a block: every sequence whose block table lists it (one reference
// each), plus the prefix cache when it keeps the block for reuse (one reference,
// recorded as the `cached` flag). A block with no owner is free. The pool only
// counts; what a block holds is the model runner's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace distllm::serve {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  // Blocks some sequence references (cached-only blocks do not count): what
  // kv_cache_usage_perc reports, since cached-only blocks can be evicted at will.
  int num_active() const { return num_active_; }
  // Blocks the prefix cache holds (some may also be active).
  int num_cached() const { return num_cached_; }
  // Cached blocks no sequence references: the prefix cache can evict all of them
  // (sequences pin whole prefixes, so nothing pinned hangs below an idle block).
  int num_evictable() const { return num_idle_cached_; }

  // Takes a free block with reference count 1, or returns -1 when none is free.
  int32_t allocate();
  void incref(int32_t block);
  // Drops one reference; the block returns to the free list at zero.
  void decref(int32_t block);

  // The prefix cache takes / gives up its reference.
  void mark_cached(int32_t block);
  void unmark_cached(int32_t block);

  int ref_count(int32_t block) const { return ref_[check(block)]; }
  bool is_cached(int32_t block) const { return cached_[check(block)] != 0; }
  // References held by sequences (excludes the prefix cache's).
  int sequence_refs(int32_t block) const { return ref_[check(block)] - cached_[check(block)]; }

 private:
  size_t check(int32_t block) const;
  void add_ref(int32_t block, int delta, bool from_cache);

  std::vector<int> ref_;
  std::vector<uint8_t> cached_;
  std::vector<int32_t> free_;  // stack of free block ids
  int num_active_ = 0;
  int num_cached_ = 0;
  int num_idle_cached_ = 0;
};

}  // namespace distllm::serve
