#include "distllm/kernels/linear_bi.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

PackedLinear::PackedLinear(const float* weight, int N, int K) : PackedLinear(weight, N, K, K, 1) {}

PackedLinear PackedLinear::from_transposed(const float* weight_kn, int N, int K) {
  return PackedLinear(weight_kn, N, K, 1, N);
}

PackedLinear::PackedLinear(const float* weight, int N, int K, int64_t n_stride, int64_t k_stride)
    : N_(N), K_(K), k_chunks_((K + kLanes - 1) / kLanes) {
  const int groups = (N + kRows - 1) / kRows;
  // Every float is written once below, padding included: no zero-fill pass over a
  // buffer that can be hundreds of MB (the LM head) at start-up.
  data_.resize_uninitialized(static_cast<size_t>(groups) * k_chunks_ * kRows * kLanes);
  parallel_for(0, groups, [&](int64_t g) {
    float* dst = data_.data() + g * k_chunks_ * kRows * kLanes;
    for (int c = 0; c < k_chunks_; ++c)
      for (int j = 0; j < kRows; ++j) {
        const int64_t n = g * kRows + j;
        const int k0 = c * kLanes;
        float* lane = dst + (c * kRows + j) * kLanes;
        for (int l = 0; l < kLanes; ++l) {
          const int k = k0 + l;
          lane[l] = n < N && k < K ? weight[n * n_stride + k * k_stride] : 0.0f;
        }
      }
  });
}

namespace scalar {

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                    int mr, int g0, int g1, int /*prefetch_groups*/, int /*prefetch_phase*/,
                    int /*prefetch_period*/) {
  const int K = w.K();
  for (int g = g0; g < g1; ++g) {
    const float* p = w.group(g);
    for (int j = 0; j < PackedLinear::kRows; ++j) {
      int n = g * PackedLinear::kRows + j;
      if (n >= w.N()) break;
      for (int r = 0; r < mr; ++r) {
        float s = 0.0f;
        for (int k = 0; k < K; ++k)
          s += x[r * ldx + k] * p[((k / PackedLinear::kLanes) * PackedLinear::kRows + j) * PackedLinear::kLanes +
                                  k % PackedLinear::kLanes];
        out[r * ldo + n] = s + (bias ? bias[n] : 0.0f);
      }
    }
  }
}

}  // namespace scalar

void linear_bi(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
               int64_t M) {
  if (M <= 0 || w.N() <= 0) return;
  auto tile = use_avx2() ? avx2::linear_bi_tile : scalar::linear_bi_tile;
  // Rows are processed in panels small enough that a panel of x stays in L2 while
  // the weight streams past it once; decode (M <= panel) reads W exactly once.
  const int64_t bytes_per_row = static_cast<int64_t>(w.K()) * 4;
  const int64_t panel = std::max<int64_t>(3, std::min<int64_t>(96, (256 * 1024) / bytes_per_row / 3 * 3));
  // A task's weight block is swept once per 3-row tile of a panel: keep it near L1
  // size so batches re-read it from cache (32 KB measured as good as any size from
  // 16 to 96 KB at batch 16, and better than 1 MB). Decode keeps long runs.
  constexpr int64_t kTaskBytes = 32 * 1024;
  const int64_t group_bytes = static_cast<int64_t>(w.k_chunks()) * PackedLinear::kRows * PackedLinear::kLanes * 4;
  const int kGroupsPerTask = M <= 3 ? 8 : static_cast<int>(std::max<int64_t>(1, kTaskBytes / group_bytes));
  const int groups = (w.N() + PackedLinear::kRows - 1) / PackedLinear::kRows;
  const int64_t tasks = (groups + kGroupsPerTask - 1) / kGroupsPerTask;
  for (int64_t m0 = 0; m0 < M; m0 += panel) {
    const int64_t rows = std::min(panel, M - m0);
    // Static contiguous halves: each thread streams one long run of the packed
    // weight (measured faster than dynamic scheduling for decode).
    parallel_for(0, tasks, [&](int64_t t) {
      int g0 = static_cast<int>(t * kGroupsPerTask);
      int g1 = std::min(groups, g0 + kGroupsPerTask);
      for (int64_t r = 0; r < rows; r += 3) {
        int mr = static_cast<int>(std::min<int64_t>(3, rows - r));
        // The first sweep of a block waits on memory; the later ones compute from
        // cache, so they pull the next block into L2 behind their FMAs, each a
        // different share of its chunks (a burst from one sweep overflows the miss
        // buffers): +4% on a batch-16 gpt2-124M step, -12% time in mlp_out.
        const int sweep = static_cast<int>(r / 3), sweeps = static_cast<int>((rows + 2) / 3);
        if (sweep == 0)
          tile(out + (m0 + r) * ldo, ldo, x + (m0 + r) * ldx, ldx, w, bias, mr, g0, g1, 0, 0, 1);
        else
          tile(out + (m0 + r) * ldo, ldo, x + (m0 + r) * ldx, ldx, w, bias, mr, g0, g1, kGroupsPerTask, sweep - 1,
               sweeps - 1);
      }
    });
  }
}

}  // namespace distllm::kernels
