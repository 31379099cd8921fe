// AVX512_BF16 tiles of bf16 linear_bi (linear_bi.h): `vdpbf16ps` takes a packed
// chunk (8 k-values of 4 rows, 32 bf16 = one register) against x's chunk broadcast
// to the four rows, and adds each 32-bit lane's two products (odd element first,
// then even; each product of two bf16 is exact in f32) into an f32 lane: one
// instruction per 32 weights, nothing widened. Lane 4j + i holds row j's pair i.
// Chunks alternate between two accumulators (even and odd chunk index) so the
// adds do not wait on each other; the scalar and AVX2 tiles do the same sums in the
// same order (bit-identical for values whose products are normal numbers:
// vdpbf16ps flushes denormals, the emulation does not). Needs AVX512_BF16.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "distllm/kernels/linear_bi.h"

namespace distllm::kernels::avx512 {
namespace {

// NG (1 or 2) adjacent row groups and MR (up to 6) rows per call: each weight load
// feeds MR dot products and each x broadcast NG, instead of 3 and 1, so prefill
// re-reads the weights from L2 half as often. Every accumulator sees the same chunks
// in the same order as with one group of 3 rows: the bits do not change.
template <int MR, int NG = 1>
void rows_group_tile(float* out, int64_t ldo, const Bf16Rows& x, int64_t row0, const PackedLinear& pw, int g,
                     const float* bias, int n0, int n_valid) {
  const uint16_t* p = static_cast<const uint16_t*>(pw.group_data(g));
  const int64_t stride = pw.group_bytes() / static_cast<int64_t>(sizeof(uint16_t));  // to the next group
  const int k_chunks = pw.k_chunks();
  const uint16_t* xr[MR];
  __m512 acc[NG][MR][2];
  for (int r = 0; r < MR; ++r) xr[r] = x.row(row0 + r);
  for (int q = 0; q < NG; ++q)
    for (int r = 0; r < MR; ++r) acc[q][r][0] = acc[q][r][1] = _mm512_setzero_ps();
  // Chunk c into acc[.][r][c % 2], with the parity fixed per statement so the
  // accumulators stay in registers.
  auto chunk = [&](int c, int parity) __attribute__((always_inline)) {
    __m512bh w[NG];
    for (int q = 0; q < NG; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(p + q * stride + 32 * c) + kStreamPrefetchBytes, _MM_HINT_T1);
      w[q] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + q * stride + 32 * c));
    }
    for (int r = 0; r < MR; ++r) {
      const __m512i xv = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xr[r] + c * 8)));
      for (int q = 0; q < NG; ++q)
        acc[q][r][parity] = _mm512_dpbf16_ps(acc[q][r][parity], reinterpret_cast<__m512bh>(xv), w[q]);
    }
  };
  int c = 0;
  for (; c + 1 < k_chunks; c += 2) {
    chunk(c, 0);
    chunk(c + 1, 1);
  }
  if (c < k_chunks) chunk(c, 0);
  for (int q = 0; q < NG; ++q)
    for (int r = 0; r < MR; ++r) {
      alignas(64) float v[16];
      _mm512_store_ps(v, _mm512_add_ps(acc[q][r][0], acc[q][r][1]));
      store_lane_sums(out, ldo, r, v, 4, bias, n0 + q * PackedLinear::kRows,
                      q + 1 < NG ? PackedLinear::kRows : n_valid);
    }
}

}  // namespace

#define DISTLLM_ROWS_TILE_PAIRS
#include "distllm/kernels/linear_bi_rows_tile_loop.h"
#undef DISTLLM_ROWS_TILE_PAIRS

int linear_bi_bf16_tile_max_rows() { return kRowsTileMaxRows; }

void linear_bi_bf16_tile(float* out, int64_t ldo, const Bf16Rows& x, int64_t row0, const PackedLinear& w,
                         const float* bias, int mr, int g0, int g1) {
  rows_tile(out, ldo, x, row0, w, bias, mr, g0, g1);
}

}  // namespace distllm::kernels::avx512
