// AMX tiles of int8 linear_bi (linear_bi.h), for batches of rows: prefill and
// batched decode. One `tdpbssd` multiplies 16 rows of x by 16 outputs over one
// 32-wide quantization block (signed by signed bytes, exact int32 sums): 8,192
// products per instruction, against 64 per VNNI `vpdpbusd`. What is left is the
// per-block float step every int8 tile takes (acc = fma(float(dot), s_w * s_x,
// acc)), done here on 16 outputs at once from the stored C tile, so the results
// are the other tiles' bits.
//
// Tile layout: C is [rows of x][16 outputs] int32; A is 16 rows of x by the block's
// 32 bytes, read in place from Q8Rows; B is the block's 32 k by 16 outputs in the
// "four k per dword" order tdpbssd takes ([k / 4][output][k % 4]). B is not the
// packed weight layout ([group][chunk][4 rows][8 k]), so each strip of 16 outputs
// (4 groups) is rearranged once into a per-thread buffer (two dword permutes per
// 128 bytes) and reused for every 16 rows of the batch.
#if defined(__GNUC__) && !defined(__clang__)
// The C tiles are stored to memory by `tilestored`, which GCC does not see writing.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/linear_bi.h"

namespace distllm::kernels::amx {
namespace {

constexpr int kStripOutputs = kStripGroups * PackedLinear::kRows;  // 16: one C tile's columns
constexpr int kBlockK = PackedLinear::kQuantBlock;                 // 32: one A tile's bytes per row
constexpr int kMaxRows = 16;                                       // one tile's rows
constexpr int kBTileBytes = kBlockK * kStripOutputs;               // 512: [8][16][4]

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

// The strip of groups [g, g + 4) (those below g_end; the rest read as zero) in tile
// layout: b_tiles [k_blocks][8][64] and its scales [k_blocks][16].
void pack_strip(const PackedLinear& w, int g, int g_end, int8_t* b_tiles, float* scales) {
  const int k_chunks = w.k_chunks(), k_blocks = w.k_blocks();
  const int8_t* src[kStripGroups];
  const float* src_scales[kStripGroups];
  for (int i = 0; i < kStripGroups; ++i) {
    const bool real = g + i < g_end;
    src[i] = real ? static_cast<const int8_t*>(w.group_data(g + i)) : nullptr;
    src_scales[i] = real ? w.group_scales(g + i) : nullptr;
  }
  // A packed chunk of a group is 8 dwords, dword 2j + h holding row j's k = 4h..4h+3;
  // B's row 2·cc + h wants dword h of every output's 8 k, outputs in order.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  auto chunk = [&](int i, int c) {
    return src[i] ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[i] + c * 32)) : _mm256_setzero_si256();
  };
  // The next strip lies right after this one (a thread takes consecutive strips):
  // pull it in while this one is rearranged, as the hardware prefetcher does not
  // follow four short interleaved streams (batch 8 read weights at 13 GB/s).
  const int64_t strip_bytes = kStripGroups * w.group_bytes();
  for (int b = 0; b < k_blocks; ++b) {
    for (int cc = 0; cc < 4; ++cc) {
      int8_t* row = b_tiles + b * kBTileBytes + 2 * cc * 64;
      const int c = 4 * b + cc;
      if (cc % 2 == 0 && c < k_chunks)
        for (int i = 0; i < kStripGroups; ++i)
          if (src[i]) _mm_prefetch(reinterpret_cast<const char*>(src[i] + c * 32 + strip_bytes), _MM_HINT_T0);
      if (c >= k_chunks) {
        _mm512_store_si512(row, _mm512_setzero_si512());
        _mm512_store_si512(row + 64, _mm512_setzero_si512());
        continue;
      }
      const __m512i g01 = _mm512_inserti64x4(_mm512_castsi256_si512(chunk(0, c)), chunk(1, c), 1);
      const __m512i g23 = _mm512_inserti64x4(_mm512_castsi256_si512(chunk(2, c)), chunk(3, c), 1);
      _mm512_store_si512(row, _mm512_permutex2var_epi32(g01, even, g23));
      _mm512_store_si512(row + 64, _mm512_permutex2var_epi32(g01, odd, g23));
    }
    for (int i = 0; i < kStripGroups; ++i)
      for (int j = 0; j < PackedLinear::kRows; ++j)
        scales[b * kStripOutputs + i * PackedLinear::kRows + j] =
            src_scales[i] ? src_scales[i][b * PackedLinear::kRows + j] : 0.0f;
  }
}

// MR rows of x (starting at row r0) against one packed strip: out[r][n0 + n] for
// n < n_valid. The tiles are configured for MR rows.
template <int MR>
void strip_rows(float* out, int64_t ldo, const Q8Rows& x, int64_t r0, const int8_t* b_tiles, const float* scales,
                int k_blocks, const float* bias, int n0, int n_valid) {
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

using StripRows = void (*)(float*, int64_t, const Q8Rows&, int64_t, const int8_t*, const float*, int, const float*,
                           int, int);

template <size_t... I>
constexpr std::array<StripRows, sizeof...(I)> strip_rows_table(std::index_sequence<I...>) {
  return {&strip_rows<static_cast<int>(I) + 1>...};
}
constexpr std::array<StripRows, kMaxRows> kStripRows = strip_rows_table(std::make_index_sequence<kMaxRows>());

}  // namespace

void linear_bi_q8_rows(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, int64_t M, const PackedLinear& w,
                       const float* bias, int g0, int g1) {
  const int k_blocks = w.k_blocks();
  thread_local AlignedBuffer<int8_t> b_tiles;
  thread_local AlignedBuffer<float> scales;
  if (b_tiles.size() < static_cast<size_t>(k_blocks) * kBTileBytes) {
    b_tiles.resize_uninitialized(static_cast<size_t>(k_blocks) * kBTileBytes);
    scales.resize_uninitialized(static_cast<size_t>(k_blocks) * kStripOutputs);
  }
  const int n_end = std::min(w.N(), g1 * PackedLinear::kRows);
  for (int g = g0; g < g1; g += kStripGroups) {
    pack_strip(w, g, g1, b_tiles.data(), scales.data());
    const int n0 = g * PackedLinear::kRows;
    const int n_valid = std::min(kStripOutputs, n_end - n0);
    for (int64_t m = 0; m < M; m += kMaxRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kMaxRows, M - m));
      configure_tiles(mr);
      kStripRows[mr - 1](out + m * ldo, ldo, x, row0 + m, b_tiles.data(), scales.data(), k_blocks, bias, n0,
                         n_valid);
    }
  }
}

}  // namespace distllm::kernels::amx
