// AVX2 quantization of activation rows (q8_rows.h): the scalar version's bits, 32
// values at a time (max, multiply and round-to-nearest-even are exact operations,
// so lane order does not matter).
#include <algorithm>

#include "distllm/kernels/q8_rows.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

void quantize_q8_row(const float* x, int K, int blocks, int8_t* q, float* scales, int32_t* bias_sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (int b = 0; b < blocks; ++b) {
    const int k0 = b * Q8Rows::kBlock, n = std::min(K - k0, Q8Rows::kBlock);
    __m256 v[4];
    for (int i = 0; i < 4; ++i) {
      const int valid = std::clamp(n - 8 * i, 0, 8);
      v[i] = valid == 8 ? _mm256_loadu_ps(x + k0 + 8 * i)
             : valid > 0 ? _mm256_maskload_ps(x + k0 + 8 * i, simd::tail_mask(valid))
                         : _mm256_setzero_ps();
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    const float amax = simd::hmax(m);
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m256i qi[4];
    __m256i sums = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      qi[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
      sums = _mm256_add_epi32(sums, qi[i]);
    }
    // int32 -> int8 in k order: packs interleave the 128-bit lanes, a permute undoes it.
    const __m256i w01 = _mm256_packs_epi32(qi[0], qi[1]), w23 = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k0), bytes);
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sums);
    bias_sums[b] =
        Q8Rows::kWeightBias * ((lanes[0] + lanes[1] + lanes[2] + lanes[3]) + (lanes[4] + lanes[5] + lanes[6] + lanes[7]));
    scales[b] = amax / 127.0f;
  }
}

}  // namespace distllm::kernels::avx2
