// Paged key/value storage for inference: per layer, a pool of fixed-size blocks.
// Which blocks a sequence owns is decided outside (the serving KV manager, or a
// trivial sequential table for offline generation); this class only holds memory.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/model/config.h"

namespace distllm {

class PagedKvCache {
 public:
  PagedKvCache(const ModelConfig& config, int num_blocks, int block_size);

  // Bytes one block takes across all layers (K and V).
  static size_t bytes_per_block(const ModelConfig& config, int block_size);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int64_t kv_dim() const { return kv_dim_; }
  float* k_layer(int layer) { return k_.data() + layer * layer_stride_; }
  float* v_layer(int layer) { return v_.data() + layer * layer_stride_; }
  // Row for position `pos` of a sequence with this block table.
  float* k_row(int layer, const int32_t* block_table, int pos) {
    return k_layer(layer) + row_offset(block_table, pos);
  }
  float* v_row(int layer, const int32_t* block_table, int pos) {
    return v_layer(layer) + row_offset(block_table, pos);
  }

 private:
  int num_blocks_, block_size_;
  int64_t kv_dim_;
  int64_t layer_stride_;
  AlignedBuffer<float> k_, v_;

  int64_t row_offset(const int32_t* table, int pos) const {
    return (static_cast<int64_t>(table[pos / block_size_]) * block_size_ + pos % block_size_) * kv_dim_;
  }
};

}  // namespace distllm
