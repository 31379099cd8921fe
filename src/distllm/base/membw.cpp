#include "distllm/base/membw.h"

#include <algorithm>
#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/parallel.h"
#include "distllm/base/timer.h"

namespace distllm {

MemoryBandwidth measure_memory_bandwidth(int megabytes, int reps) {
  const int64_t n = (static_cast<int64_t>(megabytes) << 20) / sizeof(double);
  AlignedBuffer<double> a(n), b(n), c(n);
  // First touch in parallel so pages land where the threads run.
  parallel_chunks(0, n, [&](int64_t lo, int64_t hi, int) {
    for (int64_t i = lo; i < hi; ++i) {
      a[i] = 1.0;
      b[i] = 2.0;
      c[i] = 0.5;
    }
  });
  const double s = 3.0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    parallel_chunks(0, n, [&](int64_t lo, int64_t hi, int) {
      double* __restrict pa = a.data();
      const double* __restrict pb = b.data();
      const double* __restrict pc = c.data();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    double sec = t.seconds();
    best = std::max(best, 3.0 * sizeof(double) * n / sec / 1e9);
  }
  MemoryBandwidth m;
  m.triad_gb_per_s = best;
  return m;
}

}  // namespace distllm
