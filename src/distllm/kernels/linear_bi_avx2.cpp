#include "distllm/base/error.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {

namespace {

// Widens chunk j (8 lanes) of a packed k-chunk to f32. `p` is the chunk's first
// element.
struct F32Weights {
  using Elem = float;
  static __m256 load(const float* p, int j) { return _mm256_load_ps(p + j * 8); }
};

// MR rows of x against one packed group of 4 weight rows: 4*MR accumulators, each
// seeing the k-chunks in ascending order and nothing else, so the tiling cannot
// change any result. The tail chunk's x lanes are masked and the packed weight is
// zero there, exactly as a masked dot product would be. No software prefetch: the
// packed layout is one sequential stream per thread, which the hardware prefetcher
// follows better than any distance we tried (0-32 KB; see docs/benchmarks.md).
// Batches sweep each block of groups once per 3-row tile, which the hardware
// prefetcher does not run ahead of: there the caller asks for the next block
// (`ahead` bytes further on; 0 = none) during sweeps that compute from cache, one
// chunk in every `period` starting at `phase`. Each weight chunk is widened once
// and used for all MR rows.
template <int MR, class W>
inline void group_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const typename W::Elem* p,
                       int k_chunks, int K, const float* bias, int n0, int n_valid,
                       int64_t ahead, const char* end, int phase, int period) {
  __m256 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  const int full = K / 8;
  int countdown = phase;
  auto chunk = [&](const __m256* xv) __attribute__((always_inline)) {
    for (int j = 0; j < 4; ++j) {
      const __m256 wv = W::load(p, j);
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  };
  auto prefetch = [&]() __attribute__((always_inline)) {
    if (ahead <= 0) return;
    if (countdown == 0) {
      const char* at = reinterpret_cast<const char*>(p) + ahead;
      if (at < end) {
        _mm_prefetch(at, _MM_HINT_T1);
        if (sizeof(typename W::Elem) == 4) _mm_prefetch(at + 64, _MM_HINT_T1);
      }
      countdown = period;
    }
    --countdown;
  };
  auto load_x = [&](int c, __m256* xv) __attribute__((always_inline)) {
    if (c < full) {
      for (int r = 0; r < MR; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + c * 8);
    } else {
      const __m256i m = simd::tail_mask(K - full * 8);
      for (int r = 0; r < MR; ++r) xv[r] = _mm256_maskload_ps(x + r * ldx + c * 8, m);
    }
  };
  for (int c = 0; c < k_chunks; ++c, p += 32) {
    prefetch();
    __m256 xv[MR];
    load_x(c, xv);
    chunk(xv);
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < n_valid; ++j) out[r * ldo + n0 + j] = simd::hsum(acc[r][j]) + (bias ? bias[n0 + j] : 0.0f);
}

using F32TileWeights = F32Weights;

}  // namespace

#include "distllm/kernels/linear_bi_tile_loop.h"

}  // namespace distllm::kernels::avx2
