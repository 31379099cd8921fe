#include "distllm/model/kv_cache.h"

#include <cstring>

#include "distllm/base/error.h"

namespace distllm {

bool PagedKvCache::supports(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

PagedKvCache::PagedKvCache(const ModelConfig& config, int num_blocks, int block_size, DType dtype)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      kv_dim_(static_cast<int64_t>(config.n_kv_head) * config.head_dim),
      dtype_(dtype),
      elem_bytes_(dtype_size(dtype)) {
  DL_CHECK(num_blocks > 0, "KV cache needs at least one block, got %d", num_blocks);
  DL_CHECK(block_size > 0, "KV block size must be positive, got %d", block_size);
  DL_CHECK(supports(dtype), "--kv-cache-dtype must be f32 or bf16, not %s", dtype_short_name(dtype));
  layer_stride_bytes_ = static_cast<int64_t>(num_blocks) * block_size * kv_dim_ * static_cast<int64_t>(elem_bytes_);
  // Not zeroed: a slot is read only after its position was written (the paged-KV
  // contract), and zeroing a GiB-sized cache up front touches every page — most of
  // a server's start-up time. Pages are faulted in as sequences first reach them.
  k_.resize_uninitialized(static_cast<size_t>(layer_stride_bytes_ * config.n_layer));
  v_.resize_uninitialized(static_cast<size_t>(layer_stride_bytes_ * config.n_layer));
}

size_t PagedKvCache::bytes_per_block(const ModelConfig& config, int block_size, DType dtype) {
  DL_CHECK(supports(dtype), "--kv-cache-dtype must be f32 or bf16, not %s", dtype_short_name(dtype));
  return static_cast<size_t>(2) * config.n_layer * block_size * config.n_kv_head * config.head_dim * dtype_size(dtype);
}

void PagedKvCache::write_row(int layer, const int32_t* block_table, int pos, const float* k, const float* v) {
  const int64_t off = row_offset_bytes(block_table, pos);
  uint8_t* kd = static_cast<uint8_t*>(k_layer(layer)) + off;
  uint8_t* vd = static_cast<uint8_t*>(v_layer(layer)) + off;
  if (dtype_ == DType::kF32) {
    std::memcpy(kd, k, sizeof(float) * kv_dim_);
    std::memcpy(vd, v, sizeof(float) * kv_dim_);
    return;
  }
  uint16_t* kh = reinterpret_cast<uint16_t*>(kd);
  uint16_t* vh = reinterpret_cast<uint16_t*>(vd);
  for (int64_t i = 0; i < kv_dim_; ++i) kh[i] = f32_to_bf16(k[i]);
  for (int64_t i = 0; i < kv_dim_; ++i) vh[i] = f32_to_bf16(v[i]);
}

void PagedKvCache::read_row(int layer, const int32_t* block_table, int pos, float* k, float* v) const {
  const int64_t off = row_offset_bytes(block_table, pos);
  const uint8_t* ks = static_cast<const uint8_t*>(k_layer(layer)) + off;
  const uint8_t* vs = static_cast<const uint8_t*>(v_layer(layer)) + off;
  if (dtype_ == DType::kF32) {
    std::memcpy(k, ks, sizeof(float) * kv_dim_);
    std::memcpy(v, vs, sizeof(float) * kv_dim_);
    return;
  }
  const uint16_t* kh = reinterpret_cast<const uint16_t*>(ks);
  const uint16_t* vh = reinterpret_cast<const uint16_t*>(vs);
  for (int64_t i = 0; i < kv_dim_; ++i) k[i] = bf16_to_f32(kh[i]);
  for (int64_t i = 0; i < kv_dim_; ++i) v[i] = bf16_to_f32(vh[i]);
}

}  // namespace distllm
