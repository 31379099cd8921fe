// Batch-invariant linear layer for inference: out[m, n] = dot(x[m, :], W[n, :]) + b[n]
// for a weight W given in [N, K] (out, in) layout.
//
// Every output element is reduced in one fixed order (8-lane partial sums over k
// ascending, then a fixed horizontal sum), whatever M is, how rows are grouped
// into tiles, or how many threads run. A sequence therefore gets bit-identical
// logits whether it runs alone, in a batch of 16, in one prefill or in chunks, or
// recomputed after preemption. OpenBLAS does not promise this (its results for a
// row change with M), so inference does not use it.
//
// The weight is packed once into groups of 4 output rows whose 8-wide k-chunks are
// interleaved ([N/4][K/8][4][8], zero-padded), so a tile reads one sequential stream
// instead of four: decode is bound by how fast weights stream from memory.
//
// Low precision (`--dtype`): the packed weights may be stored as bf16 (2 bytes,
// rounded to nearest even) or int8 (1 byte, symmetric, with one f32 scale per row
// and 32-wide k-block, as llama.cpp's q8_0). int8 has a layout of its own: strips
// of 16 output rows; per strip and block, 8 rows of 64 bytes [k / 4][output][k % 4]
// (an AMX B tile as it is, and one 512-bit VNNI operand per row: 16 outputs times
// 4 k).
//   bf16: x is rounded to bf16 too (bf16_rows.h) and each pair of bf16 products is
//         added into f32 lanes, as AVX512_BF16's `vdpbf16ps` does; the AVX2 and
//         scalar paths take the same sums in the same order. No weight is widened
//         in a separate step.
//   int8: q8_0 x q8_0, as llama.cpp runs q8_0 models. The activations are quantized
//         per row and 32-wide block too (q8_rows.h), each block's dot product is
//         taken in integers (AMX `tdpbssd`, AVX-512 VNNI `vpdpbusd`, or AVX2
//         `maddubs`), exact, and added into one f32 sum per output with one FMA by
//         both blocks' scales, blocks in ascending k: acc = fma(float(dot_b),
//         s_w * s_x, acc); out = acc + bias. No weight is widened to f32, which is
//         what kept weight-only int8 far from its bandwidth roofline.
// Every dtype keeps a fixed reduction order per row, and with it batch invariance;
// every ISA gives the same bits. Fewer bytes per weight is what makes decode faster.
#pragma once

#include <cstdint>
#include <functional>

#include "distllm/base/aligned_buffer.h"
#include "distllm/kernels/bf16_rows.h"
#include "distllm/kernels/q8_rows.h"
#include "distllm/tensor/dtype.h"

namespace distllm::kernels {

class PackedLinear {
 public:
  static constexpr int kRows = 4;         // output rows per group
  static constexpr int kLanes = 8;        // k per chunk
  static constexpr int kQuantBlock = 32;  // int8: k per scale (4 chunks)
  static constexpr int kStripRows = 16;   // int8: output rows per strip
  static constexpr int kStripBlockBytes = kStripRows * kQuantBlock;  // int8: one block of a strip

  // The weight dtypes a PackedLinear can hold.
  static bool supports(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI8; }

  PackedLinear() = default;
  // Packs W [N, K] (row-major), stored as `dtype` (f32, bf16 or i8).
  PackedLinear(const float* weight, int N, int K, DType dtype = DType::kF32);
  // Packs W given transposed, as [K, N] (GPT-2's Conv1D layout), without a
  // transposed copy in between.
  static PackedLinear from_transposed(const float* weight_kn, int N, int K, DType dtype = DType::kF32);
  // Packs W [N, K] whose rows come from read_rows(n0, count, out), which writes rows
  // [n0, n0 + count) widened to f32 into out [count, K]. For weights kept in another
  // dtype or spread over tensors (model/model_weights.h): no f32 copy of W is made,
  // only 4 rows at a time. Called concurrently from several threads.
  using RowReader = std::function<void(int64_t n0, int count, float* out)>;
  static PackedLinear from_rows(int N, int K, const RowReader& read_rows, DType dtype = DType::kF32);

  int N() const { return N_; }
  int K() const { return K_; }
  int k_chunks() const { return k_chunks_; }
  DType dtype() const { return dtype_; }
  // f32 and bf16 (int8 is packed in strips, below): bytes of one group (rows [4g,
  // 4g + 4)), k_chunks() * 32 elements.
  int64_t group_bytes() const { return static_cast<int64_t>(k_chunks_) * kRows * kLanes * elem_bytes_; }
  // The group's packed elements: floats or bf16 bits, by dtype().
  const void* group_data(int g) const { return data_.data() + g * group_bytes(); }
  const float* group(int g) const { return static_cast<const float*>(group_data(g)); }  // f32 only
  // int8: 32-wide k-blocks, strips of 16 rows, and strip s's int8 weights
  // [k_blocks()][8][16][4] and scales [k_blocks()][16].
  int k_blocks() const { return (K_ + kQuantBlock - 1) / kQuantBlock; }
  int strips() const { return (N_ + kStripRows - 1) / kStripRows; }
  int64_t strip_bytes() const { return static_cast<int64_t>(k_blocks()) * kStripBlockBytes; }
  const int8_t* strip_data(int s) const { return reinterpret_cast<const int8_t*>(data_.data()) + s * strip_bytes(); }
  const float* strip_scales(int s) const { return scales_.data() + static_cast<int64_t>(s) * k_blocks() * kStripRows; }
  // Element (n, k) as the kernels see it (widened, scaled): for tests and the
  // scalar path.
  float at(int n, int k) const;
  size_t bytes() const { return data_.size() + scales_.size() * sizeof(float); }

 private:
  // Element (n, k) of W is weight[n * n_stride + k * k_stride].
  PackedLinear(const float* weight, int N, int K, int64_t n_stride, int64_t k_stride, DType dtype);
  PackedLinear(int N, int K, DType dtype);  // allocates; the units are packed next
  // What is packed as one piece: a group of 4 rows (f32, bf16) or a strip of 16 (int8).
  int unit_rows() const { return dtype_ == DType::kI8 ? kStripRows : kRows; }
  int units() const { return (N_ + unit_rows() - 1) / unit_rows(); }
  // Packs unit u from w(j, k) = element (u * unit_rows() + j, k) for k < K and the
  // unit's real rows only.
  template <typename Elem>
  void pack_unit(int u, Elem w);

  int N_ = 0, K_ = 0, k_chunks_ = 0;
  DType dtype_ = DType::kF32;
  int elem_bytes_ = 4;
  AlignedBuffer<uint8_t> data_;
  AlignedBuffer<float> scales_;  // int8 only
};

void linear_bi(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
               int64_t M);

// Tile kernels (f32 weights): rows [0, mr) of x (mr <= linear_bi_tile_max_rows(): 3,
// or 8 on AVX-512) against the row groups [g0, g1), writing out[r * ldo + n] for
// every real row n of those groups. linear_bi_tile_rows(batch) is the tile height
// linear_bi uses for a batch of that many rows. prefetch_bytes > 0
// asks the kernel to pull the packed weights that far ahead towards L2 while it
// computes: chunk c of each group is fetched when c % prefetch_period ==
// prefetch_phase (a hint; results do not depend on it).
#define DISTLLM_LINEAR_BI_KERNELS                                                                   \
  int linear_bi_tile_max_rows();                                                                  \
  int linear_bi_tile_rows(int64_t batch);                                                         \
  void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, \
                      const float* bias, int mr, int g0, int g1, int64_t prefetch_bytes = 0,   \
                      int prefetch_phase = 0, int prefetch_period = 1);

// The int8 tiles (and the AVX2 bf16 tile) pull the packed weights this far ahead
// into L1 while they compute: with 1-2 bytes per weight the hardware prefetcher
// alone left decode at 60-68% of the bandwidth roofline; 2-4 KB ahead gave 75-77%
// for bf16 (gpt2-124M, batch 1: 12.5 -> 10.9 ms; 1 KB and 8 KB were in between).
constexpr int kRowsPrefetchBytes = 4096;

// Tiles that read the weights in one sweep (f32 decode and batches of up to 8 rows,
// every AVX-512 bf16 call) ask for them this far ahead into L2 instead: the
// hardware's L2 streamer stops at every 4 KB page, and a request 32 KB ahead has
// the line in L2 long before the loads reach it. Llama 134M, 2 threads, ms per
// decode step: bf16 batch 1 8.4 -> 6.9 (72% -> 88% of the bandwidth roofline),
// batch 8 15.4 -> 13.6; f32 batch 1 14.8 -> 14.1. 4 KB into L1 measured as the
// former, 16 KB in between, 64 KB as 32 KB (docs/benchmarks.md).
constexpr int64_t kStreamPrefetchBytes = 32 * 1024;

// The int8 and bf16 tiles' last step, the same on every ISA: row r's outputs n0 ..
// n0 + n_valid from its f32 lanes, `per_row` (1, 2 or 4) consecutive lanes per
// output, added pairwise in a fixed order, then the bias.
inline void store_lane_sums(float* out, int64_t ldo, int r, const float* lanes, int per_row, const float* bias, int n0,
                            int n_valid) {
  for (int j = 0; j < n_valid; ++j) {
    const float* l = lanes + per_row * j;
    const float sum = per_row == 1 ? l[0] : per_row == 2 ? l[0] + l[1] : (l[0] + l[1]) + (l[2] + l[3]);
    out[r * ldo + n0 + j] = sum + (bias ? bias[n0 + j] : 0.0f);
  }
}

// int8 weights: rows [row0, row0 + mr) of the quantized x (mr <=
// linear_bi_q8_tile_max_rows(): 6 on AVX-512 VNNI, else 3) against the strips
// [s0, s1). The avx512 one needs AVX512_VNNI. bf16 weights: rows against the row
// groups [s0, s1) with x rounded to bf16 (mr <= linear_bi_bf16_tile_max_rows(): 6
// on AVX-512, else 3); the avx512 one needs AVX512_BF16.
#define DISTLLM_LINEAR_BI_Q8_KERNELS                                                               \
  void linear_bi_q8_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w, \
                         const float* bias, int mr, int s0, int s1);                         \
  int linear_bi_q8_tile_max_rows();                                                          \
  void linear_bi_bf16_tile(float* out, int64_t ldo, const Bf16Rows& x, int64_t row0, const PackedLinear& w, \
                           const float* bias, int mr, int g0, int g1);                       \
  int linear_bi_bf16_tile_max_rows();

namespace scalar {
DISTLLM_LINEAR_BI_KERNELS
DISTLLM_LINEAR_BI_Q8_KERNELS
}
namespace avx2 {
DISTLLM_LINEAR_BI_KERNELS
DISTLLM_LINEAR_BI_Q8_KERNELS
}
namespace avx512 {  // bit-identical to avx2 (linear_bi_avx512.cpp, linear_bi_q8_avx512.cpp)
DISTLLM_LINEAR_BI_KERNELS
DISTLLM_LINEAR_BI_Q8_KERNELS
}
namespace amx {
// int8 weights on AMX tiles (linear_bi_q8_amx.cpp), for batches: rows [row0, row0 +
// M) of the quantized x (any M) against the strips [s0, s1), 16 rows of x at a
// time. The same bits as the other int8 tiles. Needs use_amx().
void linear_bi_q8_rows(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, int64_t M, const PackedLinear& w,
                       const float* bias, int s0, int s1);
}  // namespace amx
// Which int8 / bf16 tiles linear_bi runs here: "avx512_vnni" / "avx512_bf16",
// "avx2" or "scalar".
const char* linear_bi_q8_path();
const char* linear_bi_bf16_path();

}  // namespace distllm::kernels
