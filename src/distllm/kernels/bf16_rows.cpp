#include "distllm/kernels/bf16_rows.h"

#include <algorithm>

#include "distllm/base/parallel.h"
#include "distllm/tensor/dtype.h"

namespace distllm::kernels {

void round_bf16_rows(const float* x, int64_t ldx, int64_t M, int K, Bf16Rows& out) {
  out.rows = M;
  out.ld = (K + 7) / 8 * 8;
  out.x.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(1, M * out.ld)));
  auto round_row = [&](int64_t r) {
    uint16_t* dst = out.x.data() + r * out.ld;
    for (int k = 0; k < K; ++k) dst[k] = f32_to_bf16(x[r * ldx + k]);
    for (int64_t k = K; k < out.ld; ++k) dst[k] = 0;
  };
  // Prefill rounds hundreds of rows; decode a few (not worth waking threads).
  if (M >= 16) {
    parallel_for(0, M, round_row);
  } else {
    for (int64_t r = 0; r < M; ++r) round_row(r);
  }
}

}  // namespace distllm::kernels
