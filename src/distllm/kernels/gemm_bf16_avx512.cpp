// bf16 GEMM on AVX512_BF16: the 12 x 32 micro-kernel on vdpbf16ps and the packing
// that rounds f32 to bf16 (nearest even, vcvtne2ps2bf16) while it lays out k pairs.
//
// vdpbf16ps adds to each f32 lane the two products of a pair of bf16 in that lane,
// so a packed panel holds 32-bit words, each the bf16 of two consecutive k (the
// lower k in the low half): B's panel word [p][j] = (B[2p][j], B[2p+1][j]), A's
// word [p][i] = (A[i][2p], A[i][2p+1]), broadcast to all lanes. An odd K is padded
// with a zero pair half. The blocking, threading and edge tiles are sgemm's
// (gemm.cpp); only the depth of a panel is counted in words (k pairs).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // g++ 12 header bug (see gemm_avx512.cpp)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "distllm/kernels/gemm.h"
#include "distllm/kernels/gemm_avx512_common.h"

namespace distllm::kernels::detail::avx512_bf16 {

namespace {

inline __m512bh as_bh(__m512 v) { return reinterpret_cast<__m512bh>(v); }

// Words j < 16 of (x[j], y[j]) rounded to bf16: the layout of two consecutive k.
inline __m512 interleave_pairs(__m512 x, __m512 y) {
  // cvtne2ps gives [bf16(x0..x15), bf16(y0..y15)] as 16-bit elements; vpermw
  // interleaves the halves.
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y, x));
  return _mm512_castsi512_ps(_mm512_permutexvar_epi16(idx, v));
}

// Reads rows i < rows (each `kcount` <= 32 floats along k, lds apart; missing rows
// zero), rounds each to 16 pair words, and writes pair p of the block, masked by
// store_mask, to d + p * ldd for p < ceil(kcount / 2).
inline void pack_rows_transposed(const float* s, int64_t lds, int rows, int kcount, float* d, int64_t ldd,
                                 __mmask16 store_mask) {
  const __mmask16 m0 = avx512::first_lanes(kcount), m1 = avx512::first_lanes(kcount - 16);
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    if (i < rows) {
      const __m512 lo = _mm512_maskz_loadu_ps(m0, s + i * lds), hi = _mm512_maskz_loadu_ps(m1, s + i * lds + 16);
      r[i] = reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo));  // word p = (k 2p, k 2p+1)
    } else {
      r[i] = _mm512_setzero_ps();
    }
  }
  __m512 out[16];
  avx512::transpose16x16(r, out);
  const int pairs = (kcount + 1) / 2;
  for (int p = 0; p < pairs; ++p) _mm512_mask_storeu_ps(d + p * ldd, store_mask, out[p]);
}

}  // namespace

void gemm_kernel(int64_t kd, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta) {
  static_assert(kNR == 32, "prefetch_b_row reads 32-wide rows");
  constexpr int MR = kMR;
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kd; ++p) {
    const __m512bh b0 = as_bh(_mm512_load_ps(b)), b1 = as_bh(_mm512_load_ps(b + 16));
    avx512::prefetch_b_row(b);  // A stays in L1; B streams from L2
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = as_bh(_mm512_set1_ps(a[i]));  // the pair word, bits unchanged
      acc0[i] = _mm512_dpbf16_ps(acc0[i], ai, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], ai, b1);
    }
    a += MR;
    b += kNR;
  }
  avx512::store_tile<MR>(acc0, acc1, c, ldc, alpha, beta);
}

void pack_a(float* dst, const float* A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
  constexpr int MR = kMR;
  static_assert(MR <= 16, "one masked vector per k pair");
  const int64_t kd = (kc + 1) / 2;
  for (int64_t p = 0; p < mc; p += MR) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, mc - p));
    float* d = dst + p * kd;
    if (trans) {  // op(A)(i, k) = A[k * lda + i]: MR contiguous values per k
      const __mmask16 m = avx512::first_lanes(rows);
      const float* s = A + k0 * lda + i0 + p;
      for (int64_t k = 0; k < kc; k += 2, s += 2 * lda, d += MR) {
        const __m512 x = _mm512_maskz_loadu_ps(m, s);
        const __m512 y = k + 1 < kc ? _mm512_maskz_loadu_ps(m, s + lda) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(d, avx512::first_lanes(MR), interleave_pairs(x, y));
      }
    } else {  // rows of A along k: 32-deep blocks become 16 pair words, transposed
      const float* s = A + (i0 + p) * lda + k0;
      for (int64_t k = 0; k < kc; k += 32)
        pack_rows_transposed(s + k, lda, rows, static_cast<int>(std::min<int64_t>(32, kc - k)), d + k / 2 * MR, MR,
                             avx512::first_lanes(MR));
    }
  }
}

void pack_b(float* dst, const float* B, int64_t ldb, bool trans, int64_t k0, int64_t kc, int64_t j0, int64_t nc) {
  constexpr int NR = kNR;
  const int64_t kd = (kc + 1) / 2;
  for (int64_t p = 0; p < nc; p += NR) {
    const int cols = static_cast<int>(std::min<int64_t>(NR, nc - p));
    float* d = dst + p * kd;
    if (!trans) {  // op(B)(k, j) = B[k * ldb + j]: NR contiguous values per k
      const float* s = B + k0 * ldb + j0 + p;
      const __mmask16 m0 = avx512::first_lanes(cols), m1 = avx512::first_lanes(cols - 16);
      for (int64_t k = 0; k < kc; k += 2, s += 2 * ldb, d += NR) {
        const bool pair = k + 1 < kc;
        const __m512 x0 = _mm512_maskz_loadu_ps(m0, s), x1 = _mm512_maskz_loadu_ps(m1, s + 16);
        const __m512 y0 = pair ? _mm512_maskz_loadu_ps(m0, s + ldb) : _mm512_setzero_ps();
        const __m512 y1 = pair ? _mm512_maskz_loadu_ps(m1, s + ldb + 16) : _mm512_setzero_ps();
        _mm512_store_ps(d, interleave_pairs(x0, y0));
        _mm512_store_ps(d + 16, interleave_pairs(x1, y1));
      }
    } else {  // columns of op(B) are rows of B along k: transpose 16-column halves
      const float* s = B + (j0 + p) * ldb + k0;
      for (int h = 0; h < NR / 16; ++h) {
        const int rows = std::clamp(cols - 16 * h, 0, 16);
        for (int64_t k = 0; k < kc; k += 32)
          pack_rows_transposed(s + 16 * h * ldb + k, ldb, rows, static_cast<int>(std::min<int64_t>(32, kc - k)),
                               d + k / 2 * NR + 16 * h, NR, 0xFFFF);
      }
    }
  }
}

}  // namespace distllm::kernels::detail::avx512_bf16
