#include "distllm/kernels/q8_rows.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace scalar {

void quantize_q8_row(const float* x, int K, int blocks, int8_t* q, float* scales, int32_t* bias_sums) {
  for (int b = 0; b < blocks; ++b) {
    const int k0 = b * Q8Rows::kBlock, k1 = std::min(K, k0 + Q8Rows::kBlock);
    float amax = 0.0f;
    for (int k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int k = k0; k < k0 + Q8Rows::kBlock; ++k) {
      // Round half to even (the FPU's default mode), as _mm256_round_ps does.
      const float v = k < k1 ? std::clamp(std::nearbyint(x[k] * inv), -127.0f, 127.0f) : 0.0f;
      q[k] = static_cast<int8_t>(v);
      sum += q[k];
    }
    scales[b] = amax / 127.0f;
    bias_sums[b] = Q8Rows::kWeightBias * sum;
  }
}

}  // namespace scalar

void quantize_q8_rows(const float* x, int64_t ldx, int64_t M, int K, Q8Rows& out) {
  out.rows = M;
  out.blocks = (K + Q8Rows::kBlock - 1) / Q8Rows::kBlock;
  out.ld = static_cast<int64_t>(out.blocks) * Q8Rows::kBlock;
  out.q.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(1, M * out.ld)));
  out.scales.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(1, M * out.blocks)));
  out.bias_sums.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(1, M * out.blocks)));
  auto row = use_avx2() ? avx2::quantize_q8_row : scalar::quantize_q8_row;
  auto quantize_row = [&](int64_t r) {
    row(x + r * ldx, K, out.blocks, out.q.data() + r * out.ld, out.scales.data() + r * out.blocks,
        out.bias_sums.data() + r * out.blocks);
  };
  // Prefill quantizes hundreds of rows; decode a few (not worth waking threads).
  if (M >= 16) {
    parallel_for(0, M, quantize_row);
  } else {
    for (int64_t r = 0; r < M; ++r) quantize_row(r);
  }
}

}  // namespace distllm::kernels
