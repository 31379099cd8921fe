// AMX tiles of int8 linear_bi (linear_bi.h), for batches of rows: prefill and
// batched decode. One `tdpbssd` multiplies 16 rows of x by a strip's 16 outputs
// (signed bytes) over one 32-wide quantization block, exact int32 sums: 8,192
// products per instruction, against 64 per VNNI `vpdpbusd`. The strip block is a B
// tile as it lies in memory ([k / 4][output][k % 4]), and the rows of x are read in
// place from Q8Rows as the A tile. What is left is the per-block float step every
// int8 tile takes (acc = fma(float(dot), s_w * s_x, acc)), done on 16 outputs at
// once from the stored C tile, so the results are the other tiles' bits.
#if defined(__GNUC__) && !defined(__clang__)
// The C tiles are stored to memory by `tilestored`, which GCC does not see writing.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "distllm/kernels/linear_bi.h"

namespace distllm::kernels::amx {
namespace {

constexpr int kStripOutputs = PackedLinear::kStripRows;            // 16: one C tile's columns
constexpr int kBlockK = PackedLinear::kQuantBlock;                 // 32: one A tile's bytes per row
constexpr int kMaxRows = 16;                                       // one tile's rows
constexpr int kBTileBytes = PackedLinear::kStripBlockBytes;        // 512: [8][16][4]

// Tile registers: four C tiles, so four blocks' products are in flight while the
// float step of earlier ones runs (with two, a batch of 8 rows waited on each
// product's latency: 80 cycles a block), and two each of A and B. GCC's tile
// intrinsics paste the register number into the assembly, so the calls below
// spell these numbers out: C 0-3, A 4-5, B 6-7.
constexpr int kCTiles = 4;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Shapes this thread's tiles for `m` rows of x. The configuration is per thread and
// lasts until changed, so it is loaded only when m changes.
void configure_tiles(int m) {
  thread_local int configured_rows = 0;
  if (configured_rows == m) return;
  TileConfig c;
  for (int t : {0, 1, 2, 3}) c.rows[t] = static_cast<uint8_t>(m), c.colsb[t] = kStripOutputs * 4;
  for (int t : {4, 5}) c.rows[t] = static_cast<uint8_t>(m), c.colsb[t] = kBlockK;
  for (int t : {6, 7}) c.rows[t] = kBlockK / 4, c.colsb[t] = kStripOutputs * 4;
  _tile_loadconfig(&c);
  configured_rows = m;
}

// MR rows of x (starting at row r0) against strip s: out[r][n0 + n] for n <
// n_valid. The tiles are configured for MR rows.
template <int MR>
void strip_rows(float* out, int64_t ldo, const Q8Rows& x, int64_t r0, const PackedLinear& w, int s, const float* bias) {
  const int8_t* b_tiles = w.strip_data(s);
  const float* scales = w.strip_scales(s);
  const int k_blocks = w.k_blocks();
  const int n0 = s * kStripOutputs, n_valid = std::min(kStripOutputs, w.N() - n0);
  const int8_t* a = x.row(r0);
  const long lda = static_cast<long>(x.ld);
  const float* xs[MR];
  __m512 acc[MR];
  for (int r = 0; r < MR; ++r) xs[r] = x.row_scales(r0 + r), acc[r] = _mm512_setzero_ps();
  alignas(64) int32_t c[kCTiles][kMaxRows * kStripOutputs];
  // Block b's product into C tile b % 4, through A/B tiles of b's parity.
#define DISTLLM_AMX_MULTIPLY(C, A, B, b)                      \
  do {                                                        \
    _tile_loadd(A, a + (b) * kBlockK, lda);                   \
    _tile_loadd(B, b_tiles + (b) * kBTileBytes, 64);          \
    _tile_zero(C);                                            \
    _tile_dpbssd(C, A, B);                                    \
  } while (0)
  auto multiply = [&](int b) {
    switch (b % kCTiles) {
      case 0: DISTLLM_AMX_MULTIPLY(0, 4, 6, b); break;
      case 1: DISTLLM_AMX_MULTIPLY(1, 5, 7, b); break;
      case 2: DISTLLM_AMX_MULTIPLY(2, 4, 6, b); break;
      default: DISTLLM_AMX_MULTIPLY(3, 5, 7, b); break;
    }
  };
#undef DISTLLM_AMX_MULTIPLY
  auto store = [&](int b) {
    int32_t* dst = c[b % kCTiles];
    switch (b % kCTiles) {
      case 0: _tile_stored(0, dst, kStripOutputs * 4); break;
      case 1: _tile_stored(1, dst, kStripOutputs * 4); break;
      case 2: _tile_stored(2, dst, kStripOutputs * 4); break;
      default: _tile_stored(3, dst, kStripOutputs * 4); break;
    }
  };
  // The float step of linear_bi.h, 16 outputs per instruction.
  auto scale_add = [&](int b) {
    const int32_t* cb = c[b % kCTiles];
    const __m512 sw = _mm512_load_ps(scales + b * kStripOutputs);
    for (int r = 0; r < MR; ++r) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(cb + r * kStripOutputs));
      acc[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(sw, _mm512_set1_ps(xs[r][b])), acc[r]);
    }
  };
  // Two blocks ahead: block b + 2 is multiplied before block b is stored and scaled.
  for (int b = 0; b < std::min(2, k_blocks); ++b) multiply(b);
  for (int b = 0; b < k_blocks; ++b) {
    if (b + 2 < k_blocks) multiply(b + 2);
    store(b);
    scale_add(b);
  }
  const __mmask16 valid = static_cast<__mmask16>((1u << n_valid) - 1);
  const __m512 b = bias ? _mm512_maskz_loadu_ps(valid, bias + n0) : _mm512_setzero_ps();
  for (int r = 0; r < MR; ++r) _mm512_mask_storeu_ps(out + r * ldo + n0, valid, _mm512_add_ps(acc[r], b));
}

using StripRows = void (*)(float*, int64_t, const Q8Rows&, int64_t, const PackedLinear&, int, const float*);

template <size_t... I>
constexpr std::array<StripRows, sizeof...(I)> strip_rows_table(std::index_sequence<I...>) {
  return {&strip_rows<static_cast<int>(I) + 1>...};
}
constexpr std::array<StripRows, kMaxRows> kStripRows = strip_rows_table(std::make_index_sequence<kMaxRows>());

}  // namespace

void linear_bi_q8_rows(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, int64_t M, const PackedLinear& w,
                       const float* bias, int s0, int s1) {
  for (int s = s0; s < s1; ++s)
    for (int64_t m = 0; m < M; m += kMaxRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kMaxRows, M - m));
      configure_tiles(mr);
      kStripRows[mr - 1](out + m * ldo, ldo, x, row0 + m, w, s, bias);
    }
}

}  // namespace distllm::kernels::amx
