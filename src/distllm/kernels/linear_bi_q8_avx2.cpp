// AVX2 tiles of int8 linear_bi (linear_bi.h): a strip block's 64-byte row (16
// outputs times 4 k) is taken as two halves of 8 outputs. `maddubs`
// multiplies unsigned by signed bytes and adds pairs into int16, so x's sign moves
// onto the weights (|x| times sign(x)·w, at most 2·127·127 per pair: no
// saturation), and `madd` by ones adds the pairs into each output's int32 lane.
// Each block's dot product is exact; the float step is linear_bi.h's, so the bits
// are the scalar tile's.
#include <cstring>

#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/simd_avx2.h"

namespace distllm::kernels::avx2 {
namespace {

constexpr int kMaxRows = 3;

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
  const float* scales = w.strip_scales(s);
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xr[MR];
  const float* xs[MR];
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    xr[r] = x.row(row0 + r), xs[r] = x.row_scales(row0 + r);
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  }
  const int k_blocks = w.k_blocks();
  for (int b = 0; b < k_blocks; ++b, p += PackedLinear::kStripBlockBytes) {
    __m256i dot[MR][2];
    for (int r = 0; r < MR; ++r) dot[r][0] = dot[r][1] = _mm256_setzero_si256();
    for (int k4 = 0; k4 < Q / 4; ++k4) {
      _mm_prefetch(reinterpret_cast<const char*>(p + k4 * 64) + kRowsPrefetchBytes, _MM_HINT_T0);
      for (int h = 0; h < 2; ++h) {
        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + k4 * 64 + h * 32));
        for (int r = 0; r < MR; ++r) {
          const __m256i xv = _mm256_set1_epi32(four_bytes(xr[r] + b * Q + k4 * 4));
          const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv));
          dot[r][h] = _mm256_add_epi32(dot[r][h], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 sw = _mm256_load_ps(scales + b * S + h * 8);
      for (int r = 0; r < MR; ++r)
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][h]), _mm256_mul_ps(sw, _mm256_set1_ps(xs[r][b])),
                                    acc[r][h]);
    }
  }
  const int n0 = s * S, n_valid = w.N() - n0 < S ? w.N() - n0 : S;
  for (int r = 0; r < MR; ++r) {
    alignas(32) float v[S];
    _mm256_store_ps(v, acc[r][0]);
    _mm256_store_ps(v + 8, acc[r][1]);
    store_lane_sums(out, ldo, r, v, 1, bias, n0, n_valid);
  }
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
    default: strips_tile<kMaxRows>(out, ldo, x, row0, w, bias, s0, s1); break;
  }
}

}  // namespace distllm::kernels::avx2
