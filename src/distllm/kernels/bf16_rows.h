// Activations rounded to bf16 for bf16 weights: each row of x becomes bf16 values
// (round to nearest even, the project's one codec: tensor/dtype.h), zero past k up
// to a whole 8-wide chunk, so the AVX512_BF16 tiles can take dot products of bf16
// pairs (`vdpbf16ps`) and the other paths the same products in the same order.
// Rounded once per linear call, row by row: results stay batch-invariant.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"

namespace distllm::kernels {

struct Bf16Rows {
  int64_t rows = 0;
  int64_t ld = 0;  // bf16 values per row: k rounded up to a multiple of 8
  AlignedBuffer<uint16_t> x;

  const uint16_t* row(int64_t r) const { return x.data() + r * ld; }
};

// Rounds rows [0, M) of x (row stride ldx, K values each) into `out`, reusing its buffer.
void round_bf16_rows(const float* x, int64_t ldx, int64_t M, int K, Bf16Rows& out);

}  // namespace distllm::kernels
