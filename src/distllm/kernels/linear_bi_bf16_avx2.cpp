// AVX2 tiles of bf16 linear_bi (linear_bi.h): the AVX512_BF16 tiles' sums
// (linear_bi_bf16_avx512.cpp) without `vdpbf16ps`. A register holds rows (2h, 2h+1)
// of a chunk as 8 bf16 pairs; a pair's odd element is its 32-bit lane with the low
// half cleared (an exact f32), the even one the lane shifted up by 16. Each lane
// adds x·w of the odd element, then of the even one (products of bf16 are exact, so
// the FMA's single rounding is vdpbf16ps's add), into the accumulator of its
// chunk's parity.
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {
namespace {

inline __m256 odd_elements(__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536))); }
inline __m256 even_elements(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }

template <int MR>
void rows_group_tile(float* out, int64_t ldo, const Bf16Rows& x, int64_t row0, const PackedLinear& pw, int g,
                     const float* bias, int n0, int n_valid) {
  const int k_chunks = pw.k_chunks();
  // One row of x at a time: 2 parities x 2 halves of accumulators (and the weights
  // come from L1 for the later rows).
  for (int r = 0; r < MR; ++r) {
    const uint16_t* p = static_cast<const uint16_t*>(pw.group_data(g));
    const uint16_t* xr = x.row(row0 + r);
    __m256 acc[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}};
    // Chunk c into acc[c % 2], with the parity fixed per statement so the
    // accumulators stay in registers.
    auto chunk = [&](int c, int parity) __attribute__((always_inline)) {
      if (r == 0) _mm_prefetch(reinterpret_cast<const char*>(p + 32 * c) + kRowsPrefetchBytes, _MM_HINT_T0);
      const __m256i xv = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xr + c * 8)));
      const __m256 x_odd = odd_elements(xv), x_even = even_elements(xv);
      for (int h = 0; h < 2; ++h) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * c + 16 * h));
        acc[parity][h] = _mm256_fmadd_ps(x_odd, odd_elements(w), acc[parity][h]);
        acc[parity][h] = _mm256_fmadd_ps(x_even, even_elements(w), acc[parity][h]);
      }
    };
    int c = 0;
    for (; c + 1 < k_chunks; c += 2) {
      chunk(c, 0);
      chunk(c + 1, 1);
    }
    if (c < k_chunks) chunk(c, 0);
    alignas(32) float v[16];
    _mm256_store_ps(v, _mm256_add_ps(acc[0][0], acc[1][0]));
    _mm256_store_ps(v + 8, _mm256_add_ps(acc[0][1], acc[1][1]));
    store_lane_sums(out, ldo, r, v, 4, bias, n0, n_valid);
  }
}

}  // namespace

#include "distllm/kernels/linear_bi_rows_tile_loop.h"

int linear_bi_bf16_tile_max_rows() { return kRowsTileMaxRows; }

void linear_bi_bf16_tile(float* out, int64_t ldo, const Bf16Rows& x, int64_t row0, const PackedLinear& w,
                         const float* bias, int mr, int g0, int g1) {
  rows_tile(out, ldo, x, row0, w, bias, mr, g0, g1);
}

}  // namespace distllm::kernels::avx2
