// AVX-512 VNNI tiles of int8 linear_bi (linear_bi.h): one 64-byte row of a strip
// block is 16 outputs times 4 k, and `vpdpbusd` multiplies it by the row of x's 4
// bytes at those k, broadcast, adding each output's four products into its int32
// lane: one instruction per 64 weights and row of x, no shuffles. `vpdpbusd` takes
// unsigned times signed bytes, so the weights' sign bits are flipped (w + 128, one
// xor per 64 weights shared by the rows of x) and 128 times the block's sum of x
// comes back off (q8_rows.h). Each block's sum is exact, and the float step is
// linear_bi.h's. Two accumulators per row
// (even and odd k / 4) halve the chain of dependent instructions; integer sums do
// not depend on their order, so the bits are the scalar tile's. Used when the CPU
// has AVX512_VNNI (use_avx512() alone does not promise it).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's conversion intrinsics start from _mm512_undefined_ps, which it reports.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "distllm/kernels/linear_bi.h"

namespace distllm::kernels::avx512 {
namespace {

constexpr int kMaxRows = 6;

inline int32_t four_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <int MR>
void strip_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w, int s,
                const float* bias) {
  constexpr int S = PackedLinear::kStripRows, Q = PackedLinear::kQuantBlock;
  const int8_t* p = w.strip_data(s);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const float* scales = w.strip_scales(s);
  const int8_t* xr[MR];
  const float* xs[MR];
  const int32_t* xsum[MR];
  __m512 acc[MR];
  for (int r = 0; r < MR; ++r) {
    xr[r] = x.row(row0 + r), xs[r] = x.row_scales(row0 + r), xsum[r] = x.row_bias_sums(row0 + r);
    acc[r] = _mm512_setzero_ps();
  }
  const int k_blocks = w.k_blocks();
  for (int b = 0; b < k_blocks; ++b, p += PackedLinear::kStripBlockBytes) {
    __m512i even[MR], odd[MR];
    for (int r = 0; r < MR; ++r) even[r] = odd[r] = _mm512_setzero_si512();
    for (int k4 = 0; k4 < Q / 4; k4 += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(p + k4 * 64) + kRowsPrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + k4 * 64 + 64) + kRowsPrefetchBytes, _MM_HINT_T0);
      const __m512i w0 = _mm512_xor_si512(_mm512_load_si512(p + k4 * 64), flip);
      const __m512i w1 = _mm512_xor_si512(_mm512_load_si512(p + k4 * 64 + 64), flip);
      for (int r = 0; r < MR; ++r) {
        even[r] = _mm512_dpbusd_epi32(even[r], w0, _mm512_set1_epi32(four_bytes(xr[r] + b * Q + k4 * 4)));
        odd[r] = _mm512_dpbusd_epi32(odd[r], w1, _mm512_set1_epi32(four_bytes(xr[r] + b * Q + k4 * 4 + 4)));
      }
    }
    const __m512 sw = _mm512_load_ps(scales + b * S);
    for (int r = 0; r < MR; ++r) {
      const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(even[r], odd[r]), _mm512_set1_epi32(xsum[r][b]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sw, _mm512_set1_ps(xs[r][b])), acc[r]);
    }
  }
  const int n0 = s * S, n_valid = w.N() - n0 < S ? w.N() - n0 : S;
  const __mmask16 valid = static_cast<__mmask16>((1u << n_valid) - 1);
  const __m512 bv = bias ? _mm512_maskz_loadu_ps(valid, bias + n0) : _mm512_setzero_ps();
  for (int r = 0; r < MR; ++r) _mm512_mask_storeu_ps(out + r * ldo + n0, valid, _mm512_add_ps(acc[r], bv));
}

template <int MR>
void strips_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w, const float* bias,
                 int s0, int s1) {
  for (int s = s0; s < s1; ++s) strip_tile<MR>(out, ldo, x, row0, w, s, bias);
}

}  // namespace

int linear_bi_q8_tile_max_rows() { return kMaxRows; }

void linear_bi_q8_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w,
                       const float* bias, int mr, int s0, int s1) {
  switch (mr) {
    case 1: strips_tile<1>(out, ldo, x, row0, w, bias, s0, s1); break;
    case 2: strips_tile<2>(out, ldo, x, row0, w, bias, s0, s1); break;
    case 3: strips_tile<3>(out, ldo, x, row0, w, bias, s0, s1); break;
    case 4: strips_tile<4>(out, ldo, x, row0, w, bias, s0, s1); break;
    case 5: strips_tile<5>(out, ldo, x, row0, w, bias, s0, s1); break;
    default: strips_tile<kMaxRows>(out, ldo, x, row0, w, bias, s0, s1); break;
  }
}

}  // namespace distllm::kernels::avx512
