#include "distllm/serve/kv_cache_manager.h"

#include <algorithm>
#include <map>

#include "distllm/base/error.h"

namespace distllm::serve {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_cache)
    : block_size_(block_size), pool_(num_blocks) {
  DL_CHECK(block_size > 0, "KV block size must be positive, got %d", block_size);
  if (enable_prefix_cache) cache_ = std::make_unique<PrefixCache>(pool_, block_size);
}

int KvCacheManager::acquire_cached_prefix(uint64_t seq_id, std::span<const int32_t> tokens) {
  auto it = tables_.find(seq_id);
  DL_ASSERT(it == tables_.end() || it->second.table.empty());
  if (!cache_ || tokens.size() < 2) return 0;
  std::vector<int32_t> blocks = cache_->match(tokens.first(tokens.size() - 1));
  if (blocks.empty()) return 0;
  for (int32_t b : blocks) pool_.incref(b);
  SeqBlocks& seq = tables_[seq_id];
  seq.table = std::move(blocks);
  seq.offered = seq.table.size();  // they came from the cache
  return static_cast<int>(seq.table.size()) * block_size_;
}

void KvCacheManager::record_prefix_query(int64_t query_tokens, int64_t hit_tokens) {
  stats_.query_tokens += query_tokens;
  stats_.hit_tokens += hit_tokens;
  stats_.query_requests += 1;
  stats_.hit_requests += hit_tokens > 0 ? 1 : 0;
}

bool KvCacheManager::allocate_slots(uint64_t seq_id, int64_t num_tokens) {
  auto [it, created] = tables_.try_emplace(seq_id);
  std::vector<int32_t>& table = it->second.table;
  int need = blocks_for_tokens(num_tokens) - static_cast<int>(table.size());
  if (need <= 0) return true;
  if (pool_.num_free() < need && cache_ && pool_.num_free() + pool_.num_evictable() >= need) {
    cache_->evict(need - pool_.num_free());
  }
  if (pool_.num_free() < need) {
    if (created) tables_.erase(it);
    return false;
  }
  for (int i = 0; i < need; ++i) {
    int32_t b = pool_.allocate();
    DL_ASSERT(b >= 0);
    table.push_back(b);
  }
  return true;
}

void KvCacheManager::cache_computed(uint64_t seq_id, std::span<const int32_t> tokens, int64_t num_computed) {
  if (!cache_) return;
  auto it = tables_.find(seq_id);
  if (it == tables_.end()) return;
  SeqBlocks& seq = it->second;
  DL_ASSERT(num_computed <= static_cast<int64_t>(tokens.size()));
  size_t full = std::min(static_cast<size_t>(num_computed / block_size_), seq.table.size());
  if (full <= seq.offered) return;
  const size_t b = static_cast<size_t>(block_size_);
  if (seq.released == 0) {
    cache_->insert(tokens.first(full * b), std::span(seq.table).first(full));
  } else {
    // The released leading blocks went to the tree when offered; new blocks hang
    // below them, so they are offered only while the tree still holds that path.
    std::vector<int32_t> path = cache_->match(tokens.first(seq.released * b));
    if (path.size() == seq.released) {
      path.insert(path.end(), seq.table.begin() + static_cast<std::ptrdiff_t>(seq.released),
                  seq.table.begin() + static_cast<std::ptrdiff_t>(full));
      cache_->insert(tokens.first(full * b), path);
    }
  }
  seq.offered = full;
}

void KvCacheManager::set_sliding_window(int window) {
  DL_CHECK(window >= 0, "sliding window must be >= 0, got %d", window);
  window_ = window;
}

int KvCacheManager::release_outside_window(uint64_t seq_id, int64_t next_position) {
  if (window_ <= 0) return 0;
  auto it = tables_.find(seq_id);
  if (it == tables_.end()) return 0;
  SeqBlocks& seq = it->second;
  const int64_t first_key = next_position + 1 - window_;
  if (first_key <= 0) return 0;
  // Blocks offered to the prefix cache stay there (the tree's reference); those
  // never offered go back to the pool. A block released before it was offered is
  // not offered afterwards (cache_computed finds the path broken).
  const size_t upto = std::min(static_cast<size_t>(first_key / block_size_), seq.table.size());
  int released = 0;
  for (; seq.released < upto; ++seq.released, ++released) {
    int32_t& block = seq.table[seq.released];
    pool_.decref(block);
    block = kReleasedKvBlock;
  }
  return released;
}

std::vector<int32_t> KvCacheManager::cached_prefix_blocks(std::span<const int32_t> tokens) {
  if (!cache_) return {};
  return cache_->match(tokens);
}

int KvCacheManager::import_prefix(std::span<const int32_t> tokens, int num_blocks,
                                  const std::function<void(int index, int32_t block)>& write) {
  if (!cache_ || num_blocks <= 0) return 0;
  const size_t b = static_cast<size_t>(block_size_);
  const size_t n = std::min(static_cast<size_t>(num_blocks), tokens.size() / b);
  const std::span<const int32_t> run = tokens.first(n * b);
  std::vector<int32_t> blocks = cache_->match(run);
  for (int32_t blk : blocks) pool_.incref(blk);  // pinned while evicting below
  const size_t have = blocks.size();
  size_t need = n - have;
  if (static_cast<size_t>(pool_.num_free()) < need && pool_.num_evictable() > 0) {
    cache_->evict(static_cast<int>(need - static_cast<size_t>(pool_.num_free())));
  }
  need = std::min(need, static_cast<size_t>(pool_.num_free()));
  try {
    for (size_t i = 0; i < need; ++i) {
      int32_t blk = pool_.allocate();
      DL_ASSERT(blk >= 0);
      blocks.push_back(blk);
      write(static_cast<int>(have + i), blk);
    }
  } catch (...) {
    for (int32_t blk : blocks) pool_.decref(blk);
    throw;
  }
  cache_->insert(run.first(blocks.size() * b), blocks);
  for (int32_t blk : blocks) pool_.decref(blk);  // the prefix cache holds them now
  return static_cast<int>(blocks.size());
}

void KvCacheManager::free(uint64_t seq_id) {
  auto it = tables_.find(seq_id);
  if (it == tables_.end()) return;
  // Release from the tail so a partially shared table frees its private blocks first.
  for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b)
    if (*b != kReleasedKvBlock) pool_.decref(*b);
  tables_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::block_table(uint64_t seq_id) const {
  auto it = tables_.find(seq_id);
  DL_ASSERT(it != tables_.end());
  return it->second.table;
}

void KvCacheManager::reset_prefix_cache() {
  if (cache_) cache_->clear();
}

void KvCacheManager::check_invariants() const {
  std::vector<int> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  for (const auto& [id, seq] : tables_) {
    DL_ASSERT(seq.offered <= seq.table.size() && seq.released <= seq.table.size());
    for (size_t i = 0; i < seq.table.size(); ++i) {
      const int32_t b = seq.table[i];
      DL_CHECK((b == kReleasedKvBlock) == (i < seq.released), "block table entry %zu of a sequence is %d", i, b);
      if (b != kReleasedKvBlock) ++refs[static_cast<size_t>(b)];
    }
  }
  int free = 0;
  for (int b = 0; b < pool_.num_blocks(); ++b) {
    int expected = refs[static_cast<size_t>(b)] + (pool_.is_cached(b) ? 1 : 0);
    DL_CHECK(pool_.ref_count(b) == expected, "block %d has %d references, expected %d", b, pool_.ref_count(b),
             expected);
    free += expected == 0 ? 1 : 0;
  }
  DL_CHECK(free == pool_.num_free(), "pool reports %d free blocks, counted %d", pool_.num_free(), free);
  if (cache_) cache_->check_invariants();
  else DL_ASSERT(pool_.num_cached() == 0);
}

}  // namespace distllm::serve
