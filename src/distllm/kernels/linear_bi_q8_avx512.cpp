// AVX-512 VNNI tiles of int8 linear_bi (linear_bi.h): `vpdpbusd` multiplies unsigned
// by signed bytes and adds each four products into an int32 lane, one instruction
// per 64 weights and row of x. The weights become unsigned by flipping their sign
// bit (w + 128, one xor per 64 weights shared by the rows of x), and each lane's
// 128 · (its half of the block's sum of q_x, q8_rows.h) is subtracted after: the
// same exact integers, lane for lane, as the AVX2 and scalar tiles, hence the same
// bits. A 512-bit register holds two chunks
// (c, c + 1) of 4 rows; x's chunks are broadcast to their halves. Used when the CPU
// has AVX512_VNNI (use_avx512() alone does not promise it).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "distllm/kernels/linear_bi.h"

namespace distllm::kernels::avx512 {
namespace {

// As in the AVX2 tiles: [s0 s0 s1 s1 s2 s2 s3 s3].
inline __m256 block_scales(const float* sw4) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sw4)), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

template <int MR>
void rows_group_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& pw, int g,
                     const float* bias, int n0, int n_valid) {
  const int8_t* p = static_cast<const int8_t*>(pw.group_data(g));
  const float* scales = pw.group_scales(g);
  const int k_chunks = pw.k_chunks();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i pair_index = _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0);
  const int8_t* xr[MR];
  const float* xs[MR];
  const int32_t* xh[MR];
  __m256 acc[MR];
  for (int r = 0; r < MR; ++r) {
    xr[r] = x.row(row0 + r), xs[r] = x.row_scales(row0 + r), xh[r] = x.row_half_sums(row0 + r);
    acc[r] = _mm256_setzero_ps();
  }
  for (int c0 = 0, b = 0; c0 < k_chunks; c0 += 4, ++b) {
    const int c1 = c0 + 4 < k_chunks ? c0 + 4 : k_chunks;
    __m512i dot[MR];
    for (int r = 0; r < MR; ++r) dot[r] = _mm512_setzero_si512();
    int c = c0;
    for (; c + 1 < c1; c += 2, p += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p) + kRowsPrefetchBytes, _MM_HINT_T0);
      const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(p), flip);
      for (int r = 0; r < MR; ++r) {
        const __m128i two = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr[r] + c * 8));
        dot[r] = _mm512_dpbusd_epi32(dot[r], w, _mm512_permutexvar_epi64(pair_index, _mm512_castsi128_si512(two)));
      }
    }
    __m256i lanes[MR];
    for (int r = 0; r < MR; ++r)
      lanes[r] = _mm256_add_epi32(_mm512_castsi512_si256(dot[r]), _mm512_extracti64x4_epi64(dot[r], 1));
    if (c < c1) {  // an odd last chunk (k not a multiple of 32)
      const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                                         _mm512_castsi512_si256(flip));
      for (int r = 0; r < MR; ++r) {
        int64_t v;
        std::memcpy(&v, xr[r] + c * 8, sizeof v);
        lanes[r] = _mm256_dpbusd_epi32(lanes[r], w, _mm256_set1_epi64x(v));
      }
      p += 32;
    }
    const __m256 sw = block_scales(scales + b * 4);
    for (int r = 0; r < MR; ++r) {
      // Each lane summed (w + 128) * x over its k: take 128 * (its half's sum of x) off.
      int64_t halves;
      std::memcpy(&halves, xh[r] + 2 * b, sizeof halves);
      const __m256i d = _mm256_sub_epi32(lanes[r], _mm256_slli_epi32(_mm256_set1_epi64x(halves), 7));
      const __m256i block_dot = _mm256_add_epi32(d, _mm256_shuffle_epi32(d, 0xB1));  // both halves, in both lanes
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

// Up to 6 rows per call: each weight load feeds twice the dot products in prefill.
#define DISTLLM_ROWS_TILE_SIX
#include "distllm/kernels/linear_bi_rows_tile_loop.h"
#undef DISTLLM_ROWS_TILE_SIX

int linear_bi_q8_tile_max_rows() { return kRowsTileMaxRows; }

void linear_bi_q8_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w,
                       const float* bias, int mr, int g0, int g1) {
  rows_tile(out, ldo, x, row0, w, bias, mr, g0, g1);
}

}  // namespace distllm::kernels::avx512
