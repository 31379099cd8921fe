#include <cmath>

#include "distllm/kernels/paged_attention.h"
#include "distllm/kernels/simd_avx2.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels::avx2 {

void paged_attention_unit(const PagedKv& kv, const PagedQuery& q, int row, int g, float* scores) {
  const int D = kv.head_dim, rep = kv.n_head / kv.n_kv_head;
  const int64_t kv_dim = static_cast<int64_t>(kv.n_kv_head) * D;
  const int ctx = q.first_pos + row + 1;
  const float* qrow = q.q + row * q.q_row_stride + static_cast<int64_t>(g) * rep * D;
  float* orow = q.out + row * q.out_row_stride + static_cast<int64_t>(g) * rep * D;
  auto key_row = [&](const float* base, int j) {
    return base + (static_cast<int64_t>(q.block_table[j / kv.block_size]) * kv.block_size + j % kv.block_size) *
                      kv_dim + static_cast<int64_t>(g) * D;
  };
  // Scores: each key row is loaded once for all query heads that share it.
  for (int j = 0; j < ctx; ++j) {
    const float* kj = key_row(kv.k, j);
    for (int i = 0; i < rep; ++i) scores[static_cast<int64_t>(i) * ctx + j] = dot(qrow + i * D, kj, D) * kv.scale;
  }
  std::vector<float> inv_sum(rep);
  for (int i = 0; i < rep; ++i) {
    float* s = scores + static_cast<int64_t>(i) * ctx;
    float mx = max_value(s, ctx);
    __m256 vmax = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= ctx; j += 8) {
      __m256 e = simd::exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
      _mm256_storeu_ps(s + j, e);
      acc = _mm256_add_ps(acc, e);
    }
    if (j < ctx) {
      __m256i m = simd::tail_mask(ctx - j);
      __m256 e = _mm256_and_ps(simd::exp(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), vmax)), _mm256_castsi256_ps(m));
      _mm256_maskstore_ps(s + j, m, e);
      acc = _mm256_add_ps(acc, e);
    }
    inv_sum[i] = 1.0f / simd::hsum(acc);
    float* o = orow + i * D;
    for (int d = 0; d < D; ++d) o[d] = 0.0f;
  }
  // Weighted values, keys ascending; again one load of each value row per group.
  for (int j = 0; j < ctx; ++j) {
    const float* vj = key_row(kv.v, j);
    for (int i = 0; i < rep; ++i) axpy(orow + i * D, scores[static_cast<int64_t>(i) * ctx + j], vj, D);
  }
  for (int i = 0; i < rep; ++i) scale(orow + i * D, inv_sum[i], D);
}

}  // namespace distllm::kernels::avx2
