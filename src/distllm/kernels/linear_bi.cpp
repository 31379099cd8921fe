#include "distllm/kernels/linear_bi.h"

#include <algorithm>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace scalar {

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const float* weight, const float* bias,
                    int mr, int K, int n0, int n1) {
  for (int r = 0; r < mr; ++r)
    for (int n = n0; n < n1; ++n) {
      const float* w = weight + static_cast<int64_t>(n) * K;
      const float* xr = x + r * ldx;
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += xr[k] * w[k];
      out[r * ldo + n] = s + (bias ? bias[n] : 0.0f);
    }
}

}  // namespace scalar

void linear_bi(float* out, int64_t ldo, const float* x, int64_t ldx, const float* weight, const float* bias, int64_t M,
               int K, int N) {
  if (M <= 0 || N <= 0) return;
  auto tile = use_avx2() ? avx2::linear_bi_tile : scalar::linear_bi_tile;
  // Rows are processed in panels small enough that a panel of x stays in L2 while
  // every weight row streams past it once; decode (M <= panel) reads W once.
  const int64_t bytes_per_row = static_cast<int64_t>(K) * 4;
  const int64_t panel = std::max<int64_t>(3, std::min<int64_t>(96, (256 * 1024) / bytes_per_row / 3 * 3));
  constexpr int kColumnsPerTask = 32;
  const int64_t tasks = (N + kColumnsPerTask - 1) / kColumnsPerTask;
  for (int64_t m0 = 0; m0 < M; m0 += panel) {
    const int64_t rows = std::min(panel, M - m0);
    parallel_for(0, tasks, [&](int64_t t) {
      int n0 = static_cast<int>(t * kColumnsPerTask);
      int n1 = std::min(N, n0 + kColumnsPerTask);
      for (int64_t r = 0; r < rows; r += 3) {
        int mr = static_cast<int>(std::min<int64_t>(3, rows - r));
        tile(out + (m0 + r) * ldo, ldo, x + (m0 + r) * ldx, ldx, weight, bias, mr, K, n0, n1);
      }
    });
  }
}

}  // namespace distllm::kernels
