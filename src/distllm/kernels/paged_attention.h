// Causal attention for inference over a paged KV cache.
//
// The cache of one layer is a pool of blocks; a block holds `block_size` token rows
// of kv_dim = n_kv_head * head_dim floats for K (and likewise V). A sequence's
// block table maps its position p to row p % block_size of block
// table[p / block_size]. Each (query row, kv head) is computed on its own in a
// fixed order (scores over keys ascending, softmax, weighted sum of values
// ascending), so results never depend on what else is in the batch.
//
// K/V elements are f32 or bf16 (PagedKv::dtype, the KV cache's storage dtype);
// bf16 rows are widened to f32 exactly in registers and all arithmetic is f32, so a
// bf16 cache gives an f32 cache's result over the rounded values (bit for bit on
// the scalar path; the AVX2 path for head_dim 32/64/80/96/128 pairs even and odd
// elements in separate lanes, a different but fixed summation order).
//
// int8 K/V (kv_layout.h: int8 values and one f32 scale per token and kv head) are
// widened to f32 in registers too; a key's scale multiplies its finished q.k dot
// product and a value's scale multiplies its softmax weight, so no element is scaled
// on its own. All of it is per token, so batch invariance holds as for f32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "distllm/kernels/kv_layout.h"
#include "distllm/tensor/dtype.h"

namespace distllm::kernels {

struct PagedKv {
  const void* k = nullptr;  // [num_blocks, block_size, n_kv_head] slices of dtype (kv_layout.h)
  const void* v = nullptr;
  DType dtype = DType::kF32;  // f32, bf16 (uint16_t bit patterns) or int8 (with scales)
  int block_size = 16;
  int n_head = 1;
  int n_kv_head = 1;
  int head_dim = 1;
  float scale = 1.0f;
  // Sliding window: a query at position p sees keys p - window < j <= p only (the
  // blocks before may have been freed and reused). 0: every key before it.
  int window = 0;
  // Soft-capping: a scaled score s becomes softcap * tanh(s / softcap). 0: none.
  float softcap = 0.0f;

  // The first key a query at position `pos` sees.
  int first_key(int pos) const { return window > 0 ? std::max(0, pos + 1 - window) : 0; }
};

// One sequence's queries: row r sits at position first_pos + r and sees keys
// [kv.first_key(first_pos + r), first_pos + r].
struct PagedQuery {
  const float* q = nullptr;  // rows of n_head * head_dim, stride q_row_stride
  int64_t q_row_stride = 0;
  float* out = nullptr;      // rows of n_head * head_dim, stride out_row_stride
  int64_t out_row_stride = 0;
  int n_rows = 0;
  int first_pos = 0;
  const int32_t* block_table = nullptr;
};

// The kernels' view of one slice, by element type T (float, uint16_t for bf16, or
// int8_t): kv head g's slice of the K or V row (`pool`, kv.k or kv.v) holding
// position j of the sequence whose block table is `table`.
template <typename T>
inline const T* kv_slice(const PagedKv& kv, const void* pool, const int32_t* table, int j, int g) {
  constexpr bool scaled = std::is_same_v<T, int8_t>;
  const int64_t slice = static_cast<int64_t>(kv.head_dim) * sizeof(T) + (scaled ? sizeof(float) : 0);
  const int64_t index = (static_cast<int64_t>(table[j / kv.block_size]) * kv.block_size + j % kv.block_size) *
                            kv.n_kv_head + g;
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(pool) + index * slice);
}
// A slice's scale: 1 unless it is int8 (multiplying by 1 is exact, so f32 and bf16
// results are unchanged by the code paths that apply it).
template <typename T>
inline float kv_scale(const T* slice, int head_dim) {
  if constexpr (std::is_same_v<T, int8_t>) {
    return kv_slice_scale(slice, head_dim);
  } else {
    return 1.0f;
  }
}

// Soft-capping of scores [0, n) in place (PagedKv::softcap > 0).
inline void softcap_scores(float* s, int n, float cap) {
  const float inv = 1.0f / cap;
  for (int j = 0; j < n; ++j) s[j] = cap * std::tanh(s[j] * inv);
}

// A query of this many rows or more is a prefill chunk: its rows read keys they
// just wrote (in cache, so not prefetched), and paged_attention computes it in units
// of several rows.
inline constexpr int kPrefillQueryRows = 16;

// All queries of all sequences, parallel over (sequence, row, range of kv heads).
void paged_attention(const PagedKv& kv, const std::vector<PagedQuery>& queries);

// One unit: query rows [row, row + n_rows) against kv heads [g0, g1). `scores`
// needs n_rows * (g1 - g0) * (n_head / n_kv_head) * (position of the last row + 1)
// floats. A row's and head's result does not depend on the rows and heads it is
// computed with.
#define DISTLLM_PAGED_ATTENTION_KERNELS                                                                  \
  void paged_attention_unit(const PagedKv& kv, const PagedQuery& q, int row, int n_rows, int g0, int g1, \
                            float* scores);

namespace scalar {
DISTLLM_PAGED_ATTENTION_KERNELS
}
namespace avx2 {
DISTLLM_PAGED_ATTENTION_KERNELS
}

}  // namespace distllm::kernels
