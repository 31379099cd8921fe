// AVX2 tiles of int8 linear_bi (linear_bi.h): int8 weights against int8 activations
// (q8_rows.h). A packed chunk holds 8 k-values of 4 rows (32 bytes); the row of x's
// 8 values is broadcast to all four. `maddubs` multiplies unsigned by signed bytes
// and adds pairs into int16, so x's sign moves onto the weights (|x| times sign(x)·w,
// at most 2·127·127 per pair: no saturation); `madd` by ones adds pairs into int32.
// Each row's block dot product is exact, then scaled once per block (see q8_rows.h).
#include <cstring>

#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {
namespace {

inline __m256i broadcast_chunk(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi64x(v);
}

// The float steps every int8 tile shares (linear_bi.h): a block's integer lanes
// (lane 2j: row j's products at k % 8 < 4, lane 2j + 1: at k % 8 >= 4) are added
// into the block's dot product (both lanes hold it), converted and added with one
// FMA by both scales; lane 2j is row j's result.
inline __m256 block_scales(const float* sw4) {  // [s0 s0 s1 s1 s2 s2 s3 s3]
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sw4)), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

template <int MR>
void rows_group_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& pw, int g,
                     const float* bias, int n0, int n_valid) {
  const int8_t* p = static_cast<const int8_t*>(pw.group_data(g));
  const float* scales = pw.group_scales(g);
  const int k_chunks = pw.k_chunks();
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xr[MR];
  const float* xs[MR];
  __m256 acc[MR];
  for (int r = 0; r < MR; ++r) xr[r] = x.row(row0 + r), xs[r] = x.row_scales(row0 + r), acc[r] = _mm256_setzero_ps();
  for (int c0 = 0, b = 0; c0 < k_chunks; c0 += 4, ++b) {
    const int c1 = c0 + 4 < k_chunks ? c0 + 4 : k_chunks;
    __m256i dot[MR];
    for (int r = 0; r < MR; ++r) dot[r] = _mm256_setzero_si256();
    for (int c = c0; c < c1; ++c, p += 32) {
      if (c % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kRowsPrefetchBytes, _MM_HINT_T0);
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      for (int r = 0; r < MR; ++r) {
        const __m256i xv = broadcast_chunk(xr[r] + c * 8);
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(w, xv));
        dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 sw = block_scales(scales + b * 4);
    for (int r = 0; r < MR; ++r) {
      const __m256i block_dot = _mm256_add_epi32(dot[r], _mm256_shuffle_epi32(dot[r], 0xB1));  // both halves
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot), _mm256_mul_ps(sw, _mm256_set1_ps(xs[r][b])), acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[r]);
    for (int j = 0; j < 4; ++j) v[j] = v[2 * j];
    store_lane_sums(out, ldo, r, v, 1, bias, n0, n_valid);
  }
}

}  // namespace

#include "distllm/kernels/linear_bi_rows_tile_loop.h"

int linear_bi_q8_tile_max_rows() { return kRowsTileMaxRows; }

void linear_bi_q8_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w,
                       const float* bias, int mr, int g0, int g1) {
  rows_tile(out, ldo, x, row0, w, bias, mr, g0, g1);
}

}  // namespace distllm::kernels::avx2
