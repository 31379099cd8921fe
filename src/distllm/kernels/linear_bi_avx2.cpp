#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

namespace {

// MR rows of x against one packed group of 4 weight rows: 4*MR accumulators, each
// seeing the k-chunks in ascending order and nothing else, so the tiling cannot
// change any result. The tail chunk's x lanes are masked and the packed weight is
// zero there, exactly as a masked dot product would be. No software prefetch: the
// packed layout is one sequential stream per thread, which the hardware prefetcher
// follows better than any distance we tried (0-32 KB; see docs/benchmarks.md).
// Batches sweep each block of groups once per 3-row tile, which the hardware
// prefetcher does not run ahead of: there the caller asks for the next block
// (`ahead` floats further on; 0 = none) during sweeps that compute from cache, one
// chunk in every `period` starting at `phase`.
template <int MR>
inline void group_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const float* p, int k_chunks, int K,
                       const float* bias, int n0, int n_valid, int64_t ahead, const float* end, int phase,
                       int period) {
  __m256 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  const int full = K / 8;
  int countdown = phase;
  for (int c = 0; c < full; ++c, p += 32) {
    if (ahead > 0) {
      if (countdown == 0) {
        if (p + ahead < end) {
          _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T1);
          _mm_prefetch(reinterpret_cast<const char*>(p + ahead + 16), _MM_HINT_T1);
        }
        countdown = period;
      }
      --countdown;
    }
    __m256 xv[MR];
    for (int r = 0; r < MR; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + c * 8);
    for (int j = 0; j < 4; ++j) {
      __m256 wv = _mm256_load_ps(p + j * 8);
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  }
  if (full < k_chunks) {
    __m256i m = simd::tail_mask(K - full * 8);
    __m256 xv[MR];
    for (int r = 0; r < MR; ++r) xv[r] = _mm256_maskload_ps(x + r * ldx + full * 8, m);
    for (int j = 0; j < 4; ++j) {
      __m256 wv = _mm256_load_ps(p + j * 8);
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < n_valid; ++j) out[r * ldo + n0 + j] = simd::hsum(acc[r][j]) + (bias ? bias[n0 + j] : 0.0f);
}

template <int MR>
void tile_rows(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias, int g0,
               int g1, int prefetch_groups, int phase, int period) {
  const int groups = (w.N() + PackedLinear::kRows - 1) / PackedLinear::kRows;
  const int64_t group_floats = static_cast<int64_t>(w.k_chunks()) * PackedLinear::kRows * 8;
  const float* end = w.group(0) + groups * group_floats;
  const int64_t ahead = prefetch_groups * group_floats;
  for (int g = g0; g < g1; ++g) {
    int n0 = g * PackedLinear::kRows;
    int n_valid = w.N() - n0 < PackedLinear::kRows ? w.N() - n0 : PackedLinear::kRows;
    group_tile<MR>(out, ldo, x, ldx, w.group(g), w.k_chunks(), w.K(), bias, n0, n_valid, ahead, end, phase, period);
  }
}

}  // namespace

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                    int mr, int g0, int g1, int prefetch_groups, int phase, int period) {
  switch (mr) {
    case 1: tile_rows<1>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_groups, phase, period); break;
    case 2: tile_rows<2>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_groups, phase, period); break;
    default: tile_rows<3>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_groups, phase, period); break;
  }
}

}  // namespace distllm::kernels::avx2
