#include "distllm/serve/block_pool.h"

#include "distllm/base/error.h"

namespace distllm::serve {

BlockPool::BlockPool(int num_blocks) {
  DL_CHECK(num_blocks > 0, "KV block pool needs at least one block, got %d", num_blocks);
  ref_.assign(static_cast<size_t>(num_blocks), 0);
  cached_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Hand out low ids first (pop from the back).
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

size_t BlockPool::check(int32_t block) const {
  DL_ASSERT(block >= 0 && static_cast<size_t>(block) < ref_.size());
  return static_cast<size_t>(block);
}

int32_t BlockPool::allocate() {
  if (free_.empty()) return -1;
  int32_t b = free_.back();
  free_.pop_back();
  DL_ASSERT(ref_[static_cast<size_t>(b)] == 0);
  add_ref(b, +1, false);
  return b;
}

void BlockPool::add_ref(int32_t block, int delta, bool from_cache) {
  size_t i = check(block);
  int seq_before = ref_[i] - cached_[i];
  bool idle_before = cached_[i] && seq_before == 0;
  ref_[i] += delta;
  if (from_cache) cached_[i] = delta > 0 ? 1 : 0;
  int seq_after = ref_[i] - cached_[i];
  DL_ASSERT(ref_[i] >= 0 && seq_after >= 0);
  if (seq_before == 0 && seq_after > 0) ++num_active_;
  if (seq_before > 0 && seq_after == 0) --num_active_;
  bool idle_after = cached_[i] && seq_after == 0;
  num_idle_cached_ += static_cast<int>(idle_after) - static_cast<int>(idle_before);
  if (ref_[i] == 0) free_.push_back(block);
}

void BlockPool::incref(int32_t block) {
  DL_ASSERT(ref_[check(block)] > 0);  // only blocks someone owns can gain owners
  add_ref(block, +1, false);
}

void BlockPool::decref(int32_t block) {
  DL_ASSERT(ref_[check(block)] - cached_[check(block)] > 0);
  add_ref(block, -1, false);
}

void BlockPool::mark_cached(int32_t block) {
  DL_ASSERT(ref_[check(block)] > 0 && !cached_[check(block)]);
  add_ref(block, +1, true);
  ++num_cached_;
}

void BlockPool::unmark_cached(int32_t block) {
  DL_ASSERT(cached_[check(block)]);
  add_ref(block, -1, true);
  --num_cached_;
}

}  // namespace distllm::serve
