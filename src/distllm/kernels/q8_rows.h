// Activations quantized for int8 weights (q8_0 x q8_0, as llama.cpp multiplies its
// q8_0 weights): each row of x, per 32-wide k-block, becomes int8 values q with one
// f32 scale s = max |x| / 127 (x ~ q * s, q rounded to nearest even), plus 128
// times the block's sum of q: the VNNI kernels multiply q by weights made unsigned
// (w + 128) and take this back off, with one broadcast from memory.
//
// The quantization runs once per linear call; its scalar and AVX2 versions give the
// same bits (tested). Every ISA's kernels therefore see the same integers: their
// integer dot products are exact and their few float operations are the same,
// which keeps int8 results bit-identical across the scalar, AVX2 and AVX-512 VNNI
// paths, and each row's result independent of the batch around it.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"

namespace distllm::kernels {

struct Q8Rows {
  static constexpr int kBlock = 32;
  static constexpr int kWeightBias = 128;  // what the VNNI kernels add to each weight
  int64_t rows = 0;
  int blocks = 0;      // per row: ceil(k / 32)
  int64_t ld = 0;      // int8 per row: blocks * 32 (zero past k)
  AlignedBuffer<int8_t> q;
  AlignedBuffer<float> scales;  // [rows][blocks]
  AlignedBuffer<int32_t> bias_sums;  // [rows][blocks]: kWeightBias * (sum of q over the block)

  const int8_t* row(int64_t r) const { return q.data() + r * ld; }
  const float* row_scales(int64_t r) const { return scales.data() + r * blocks; }
  const int32_t* row_bias_sums(int64_t r) const { return bias_sums.data() + r * blocks; }
  float dequantized(int64_t r, int k) const { return static_cast<float>(row(r)[k]) * row_scales(r)[k / kBlock]; }
};

// Quantizes rows [0, M) of x (row stride ldx, K values each) into `out`, reusing
// its buffers, on the best path available.
void quantize_q8_rows(const float* x, int64_t ldx, int64_t M, int K, Q8Rows& out);

// One row: K values into q (ld bytes, zero past K), scales and bias_sums. Per path.
namespace scalar {
void quantize_q8_row(const float* x, int K, int blocks, int8_t* q, float* scales, int32_t* bias_sums);
}
namespace avx2 {
void quantize_q8_row(const float* x, int K, int blocks, int8_t* q, float* scales, int32_t* bias_sums);
}

}  // namespace distllm::kernels
