// Paged key/value storage for inference: per layer, a pool of fixed-size blocks.
// Which blocks a sequence owns is decided outside (the serving KV manager, or a
// trivial sequential table for offline generation); this class only holds memory.
//
// Storage dtype (--kv-cache-dtype): f32 (default), bf16 or int8. bf16 halves the
// bytes per token, int8 (one f32 scale per token and kv head) takes a little over a
// quarter, so a fixed KV budget holds about twice / four times the tokens. K/V rows
// are converted once when written (kernels/kv_layout.h has the layout and the
// rounding) and widened to f32 in registers when read by the attention kernels;
// every reader sees the same stored values, so results stay independent of batch,
// chunking and thread count.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/kv_layout.h"
#include "distllm/model/config.h"
#include "distllm/tensor/dtype.h"

namespace distllm {

// A block-table entry whose block the sequence gave back because it lies wholly
// before the sliding window of every query still to come (ModelConfig::kv_window).
inline constexpr int32_t kReleasedKvBlock = -1;

class PagedKvCache {
 public:
  PagedKvCache(const ModelConfig& config, int num_blocks, int block_size, DType dtype = DType::kF32);

  // Whether `dtype` can be a KV cache's storage type (f32, bf16, int8).
  static bool supports(DType dtype) { return kernels::kv_storage_supports(dtype); }
  // Bytes one block takes across all layers (K and V).
  static size_t bytes_per_block(const ModelConfig& config, int block_size, DType dtype = DType::kF32);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  // Bytes of one token's K (or V) row in one layer: n_kv_head slices (kv_layout.h).
  size_t row_bytes() const { return row_bytes_; }
  // One layer's pool: [num_blocks, block_size] rows of row_bytes().
  void* k_layer(int layer) { return k_.data() + layer * layer_stride_bytes_; }
  void* v_layer(int layer) { return v_.data() + layer * layer_stride_bytes_; }
  const void* k_layer(int layer) const { return k_.data() + layer * layer_stride_bytes_; }
  const void* v_layer(int layer) const { return v_.data() + layer * layer_stride_bytes_; }
  // Bytes of one block in one layer's K (or V) pool.
  size_t block_bytes_per_layer() const { return static_cast<size_t>(block_size_) * row_bytes_; }

  // Stores position `pos`'s K and V rows (kv_dim f32 values each), converted to
  // the storage dtype.
  void write_row(int layer, const int32_t* block_table, int pos, const float* k, const float* v);
  // Reads position `pos`'s stored K and V rows back as f32 (exact widening; int8
  // values times their scale).
  void read_row(int layer, const int32_t* block_table, int pos, float* k, float* v) const;

 private:
  int num_blocks_, block_size_;
  int64_t kv_dim_;
  DType dtype_;
  int head_dim_;
  size_t row_bytes_;
  int64_t layer_stride_bytes_;
  AlignedBuffer<uint8_t> k_, v_;

  int64_t row_offset_bytes(const int32_t* table, int pos) const {
    return (static_cast<int64_t>(table[pos / block_size_]) * block_size_ + pos % block_size_) *
           static_cast<int64_t>(row_bytes_);
  }
};

}  // namespace distllm
