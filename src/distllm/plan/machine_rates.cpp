#include <unistd.h>

#include <algorithm>
#include <vector>

#include "distllm/base/membw.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/kernels/matmul.h"
#include "distllm/plan/plan.h"

namespace distllm::plan {

MachineRates measure_rates(int threads) {
  const int saved = num_threads();
  set_num_threads(threads);
  // A training-shaped product: 1024 rows through a 768 x 3072 weight.
  const int64_t M = 1024;
  const int K = 768, N = 3072;
  std::vector<float> a(static_cast<size_t>(M) * K), w(static_cast<size_t>(K) * N), c(static_cast<size_t>(M) * N);
  CounterRng rng(3);
  for (auto& x : a) x = rng.uniform();
  for (auto& x : w) x = rng.uniform();
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    Timer t;
    kernels::matmul_forward(c.data(), a.data(), w.data(), nullptr, M, K, N, kernels::WeightLayout::kInOut);
    double s = t.seconds();
    if (r > 0) best = std::max(best, 2.0 * M * K * N / s / 1e9);
  }
  MemoryBandwidth bw = measure_memory_bandwidth(64, 3);
  set_num_threads(saved);
  MachineRates rates;
  rates.gemm_gflops = best;
  // A shared-memory collective reads and writes every byte about twice over the
  // same memory system; measured busbw of large all-reduces lands near a quarter of
  // the triad figure on these machines.
  rates.busbw_gbs = std::max(0.5, bw.triad_gb_per_s / 4);
  rates.source = "measured";
  return rates;
}

MachineRates default_rates(int threads) { return measure_rates(threads); }

double host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 8e9;
}

}  // namespace distllm::plan
