#include "distllm/model/kv_cache.h"

#include "distllm/base/error.h"

namespace distllm {

namespace {

size_t row_bytes_of(const ModelConfig& config, DType dtype) {
  DL_CHECK(PagedKvCache::supports(dtype), "--kv-cache-dtype must be f32, bf16 or int8, not %s",
           dtype_short_name(dtype));
  return static_cast<size_t>(config.n_kv_head) * kernels::kv_head_bytes(dtype, config.head_dim);
}

}  // namespace

PagedKvCache::PagedKvCache(const ModelConfig& config, int num_blocks, int block_size, DType dtype)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      kv_dim_(static_cast<int64_t>(config.n_kv_head) * config.head_dim),
      dtype_(dtype),
      head_dim_(config.head_dim),
      row_bytes_(row_bytes_of(config, dtype)) {
  DL_CHECK(num_blocks > 0, "KV cache needs at least one block, got %d", num_blocks);
  DL_CHECK(block_size > 0, "KV block size must be positive, got %d", block_size);
  layer_stride_bytes_ = static_cast<int64_t>(num_blocks) * block_size * static_cast<int64_t>(row_bytes_);
  // Not zeroed: a slot is read only after its position was written (the paged-KV
  // contract), and zeroing a GiB-sized cache up front touches every page — most of
  // a server's start-up time. Pages are faulted in as sequences first reach them.
  k_.resize_uninitialized(static_cast<size_t>(layer_stride_bytes_ * config.n_layer));
  v_.resize_uninitialized(static_cast<size_t>(layer_stride_bytes_ * config.n_layer));
}

size_t PagedKvCache::bytes_per_block(const ModelConfig& config, int block_size, DType dtype) {
  return static_cast<size_t>(2) * config.n_layer * block_size * row_bytes_of(config, dtype);
}

void PagedKvCache::write_row(int layer, const int32_t* block_table, int pos, const float* k, const float* v) {
  const int64_t off = row_offset_bytes(block_table, pos);
  uint8_t* kd = static_cast<uint8_t*>(k_layer(layer)) + off;
  uint8_t* vd = static_cast<uint8_t*>(v_layer(layer)) + off;
  const size_t slice = kernels::kv_head_bytes(dtype_, head_dim_);
  for (int64_t g = 0; g * head_dim_ < kv_dim_; ++g) {
    kernels::kv_store_slice(dtype_, k + g * head_dim_, head_dim_, kd + g * slice);
    kernels::kv_store_slice(dtype_, v + g * head_dim_, head_dim_, vd + g * slice);
  }
}

void PagedKvCache::read_row(int layer, const int32_t* block_table, int pos, float* k, float* v) const {
  const int64_t off = row_offset_bytes(block_table, pos);
  const uint8_t* ks = static_cast<const uint8_t*>(k_layer(layer)) + off;
  const uint8_t* vs = static_cast<const uint8_t*>(v_layer(layer)) + off;
  const size_t slice = kernels::kv_head_bytes(dtype_, head_dim_);
  for (int64_t g = 0; g * head_dim_ < kv_dim_; ++g) {
    kernels::kv_load_slice(dtype_, ks + g * slice, head_dim_, k + g * head_dim_);
    kernels::kv_load_slice(dtype_, vs + g * slice, head_dim_, v + g * head_dim_);
  }
}

}  // namespace distllm
