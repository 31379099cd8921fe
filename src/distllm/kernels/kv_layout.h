// How one token's K (or V) row is stored in a paged KV cache, per storage dtype
// (--kv-cache-dtype). A row is n_kv_head head slices, one after another; a slice is
//
//   f32, bf16   head_dim elements
//   int8        head_dim int8 values, then one f32 scale (the slice is value * scale)
//
// int8 is symmetric, one scale per (token, kv head): scale = max|x| / 127, values
// rounded to nearest and clamped to [-127, 127] (an all-zero slice has scale 0). A
// slice depends on nothing but its own f32 values, so the cache stays append-only
// and a position's stored K/V is the same whichever batch or chunk wrote it (the
// batch-invariance guarantee). The scale sits right after its values so a kernel
// reading a slice touches one contiguous run of bytes.
//
// The cache (model/kv_cache), the attention kernels (paged_attention) and the KV
// transfer payload (serve/kv_transfer/wire) all use this one layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "distllm/tensor/dtype.h"

namespace distllm::kernels {

// Whether `dtype` can be a KV cache's storage type (f32, bf16, int8).
inline bool kv_storage_supports(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI8;
}

// Whether slices carry a scale after their values.
inline bool kv_is_quantized(DType dtype) { return dtype == DType::kI8; }

// Bytes of one (token, kv head) slice.
inline size_t kv_head_bytes(DType dtype, int head_dim) {
  return static_cast<size_t>(head_dim) * dtype_size(dtype) + (kv_is_quantized(dtype) ? sizeof(float) : 0);
}

// The scale of an int8 slice (`slice` points at its first value).
inline float kv_slice_scale(const int8_t* slice, int head_dim) {
  float s;
  std::memcpy(&s, slice + head_dim, sizeof s);  // may be unaligned (odd head_dim)
  return s;
}

// Stores head_dim f32 values as one slice of `dtype` at `dst` (bf16: round to
// nearest even; int8: as above).
void kv_store_slice(DType dtype, const float* x, int head_dim, void* dst);
// Reads one slice back as f32 (f32, bf16: exact; int8: value * scale).
void kv_load_slice(DType dtype, const void* src, int head_dim, float* x);

}  // namespace distllm::kernels
