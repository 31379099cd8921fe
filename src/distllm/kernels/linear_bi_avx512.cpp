// AVX-512 tiles of the batch-invariant linear (linear_bi.h), f32 weights. A 512-bit register holds
// the same k-chunk of two adjacent packed rows (j, j+1: contiguous in the packed
// layout), against the chunk of x broadcast into both halves. Each 256-bit half
// therefore sees exactly the FMAs, in exactly the order, of the AVX2 kernel's
// accumulator for that row, and the final horizontal sum is the AVX2 one: results
// are bit-identical to the AVX2 path, with half the instructions per weight.
// g++ 12's AVX-512 headers build some intrinsics from _mm512_undefined_ps() and
// then warn about it when inlined: a header bug, not ours (as in gemm_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "distllm/base/error.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx512 {
namespace {

// 256-bit halves with AVX-512F alone (the f32x8 forms need AVX512DQ).
inline __m512 both_halves(__m256 v) { return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(v))); }
inline __m512 halves(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
inline __m256 upper_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// Widens chunk c of rows (2h, 2h + 1) to f32: 16 elements at p + 16 h.
struct F32Weights {
  using Elem = float;
  static __m512 load(const float* p, int h) { return _mm512_load_ps(p + h * 16); }
};

// NG adjacent row groups at once (the loop passes 2 where it can): their
// accumulators are independent chains (FMA latency 4 x 2 ports needs 8 in flight;
// one group at mr = 3 has 6) and the x chunk loaded once feeds both groups. Each
// accumulator still sees the same FMAs in the same order: the bits do not change.
template <int MR, class W, int NG = 1>
inline void group_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const typename W::Elem* p,
                       int k_chunks, int K, const float* bias, int n0, int n_valid,
                       int64_t ahead, const char* end, int phase, int period, int64_t group_stride = 0,
                       int n_valid_last = 0) {
  __m512 acc[NG][MR][2];
  for (int g = 0; g < NG; ++g)
    for (int r = 0; r < MR; ++r) acc[g][r][0] = acc[g][r][1] = _mm512_setzero_ps();
  const int full = K / 8;
  int countdown = phase;
  auto chunk = [&](const __m512* xv) __attribute__((always_inline)) {
    for (int g = 0; g < NG; ++g)
      for (int h = 0; h < 2; ++h) {
        const __m512 wv = W::load(p + g * group_stride, h);
        for (int r = 0; r < MR; ++r) acc[g][r][h] = _mm512_fmadd_ps(xv[r], wv, acc[g][r][h]);
      }
  };
  auto prefetch = [&]() __attribute__((always_inline)) {
    if (ahead <= 0) return;
    if (countdown == 0) {
      for (int g = 0; g < NG; ++g) {
        const char* at = reinterpret_cast<const char*>(p + g * group_stride) + ahead;
        if (at < end) {
          _mm_prefetch(at, _MM_HINT_T1);
          if (sizeof(typename W::Elem) == 4) _mm_prefetch(at + 64, _MM_HINT_T1);
        }
      }
      countdown = period;
    }
    --countdown;
  };
  auto load_x = [&](int c, __m512* xv) __attribute__((always_inline)) {
    if (c < full) {
      for (int r = 0; r < MR; ++r) xv[r] = both_halves(_mm256_loadu_ps(x + r * ldx + c * 8));
    } else {
      const __m256i m = simd::tail_mask(K - full * 8);
      for (int r = 0; r < MR; ++r) xv[r] = both_halves(_mm256_maskload_ps(x + r * ldx + c * 8, m));
    }
  };
  for (int c = 0; c < k_chunks; ++c, p += 32) {
    prefetch();
    if constexpr (MR <= 3) {
      __m512 xv[MR];
      load_x(c, xv);
      chunk(xv);
    } else {
      // Up to 6 rows x 2 groups or 8 rows x 1: 24 or 16 accumulators, so the weights stay
      // loaded while each row's x is loaded just before its FMAs.
      __m512 wv[NG][2];
      for (int g = 0; g < NG; ++g)
        for (int h = 0; h < 2; ++h) wv[g][h] = W::load(p + g * group_stride, h);
      const bool tail = c >= full;
      const __m256i m = simd::tail_mask(tail ? K - full * 8 : 8);
      for (int r = 0; r < MR; ++r) {
        const __m512 xr = both_halves(tail ? _mm256_maskload_ps(x + r * ldx + c * 8, m) : _mm256_loadu_ps(x + r * ldx + c * 8));
        for (int g = 0; g < NG; ++g)
          for (int h = 0; h < 2; ++h) acc[g][r][h] = _mm512_fmadd_ps(xr, wv[g][h], acc[g][r][h]);
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    const int first = n0 + g * PackedLinear::kRows, valid = g + 1 < NG ? PackedLinear::kRows : NG > 1 ? n_valid_last : n_valid;
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < valid; ++j) {
        const __m512 a = acc[g][r][j / 2];
        const __m256 half = j % 2 == 0 ? _mm512_castps512_ps256(a) : upper_half(a);
        out[r * ldo + first + j] = simd::hsum(half) + (bias ? bias[first + j] : 0.0f);
      }
  }
}

// Up to 8 rows per call on this ISA: two groups at up to 6 rows (24 accumulators),
// one group at 7 or 8 (16). A batch of up to 8 is one sweep of the weights from
// memory (batch 8 was 6 + 2 rows, the weights read twice). Larger batches re-read
// each block from L1 once per sweep, where 6 rows of two groups take fewer loads
// per FMA (10 per 24) than 8 rows of one (10 per 16): batch 16 ran 28 ms per step
// on Llama 134M in sweeps of 6 and 32 ms in sweeps of 8.
struct F32PairedWeights : F32Weights {
  static constexpr int kGroupsPerTile = 2;
  static constexpr int kMaxRows = 8;
  static constexpr int kSweepRows = 6;
};

using F32TileWeights = F32PairedWeights;

}  // namespace

#include "distllm/kernels/linear_bi_tile_loop.h"

}  // namespace distllm::kernels::avx512
