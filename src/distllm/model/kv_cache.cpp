#include "distllm/model/kv_cache.h"

#include "distllm/base/error.h"

namespace distllm {

PagedKvCache::PagedKvCache(const ModelConfig& config, int num_blocks, int block_size)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      kv_dim_(static_cast<int64_t>(config.n_kv_head) * config.head_dim) {
  DL_CHECK(num_blocks > 0, "KV cache needs at least one block, got %d", num_blocks);
  DL_CHECK(block_size > 0, "KV block size must be positive, got %d", block_size);
  layer_stride_ = static_cast<int64_t>(num_blocks) * block_size * kv_dim_;
  // Not zeroed: a slot is read only after its position was written (the paged-KV
  // contract), and zeroing a GiB-sized cache up front touches every page — most of
  // a server's start-up time. Pages are faulted in as sequences first reach them.
  k_.resize_uninitialized(static_cast<size_t>(layer_stride_ * config.n_layer));
  v_.resize_uninitialized(static_cast<size_t>(layer_stride_ * config.n_layer));
}

size_t PagedKvCache::bytes_per_block(const ModelConfig& config, int block_size) {
  return static_cast<size_t>(2) * config.n_layer * block_size * config.n_kv_head * config.head_dim * sizeof(float);
}

}  // namespace distllm
