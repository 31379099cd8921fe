#include "distllm/base/membw.h"

#include <algorithm>
#include <cstdint>
#include <vector>

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
  MemoryBandwidth m;
  const double s = 3.0;
  std::vector<double> partial(num_threads());
  for (int r = 0; r < reps; ++r) {
    Timer t;
    parallel_chunks(0, n, [&](int64_t lo, int64_t hi, int) {
      double* __restrict pa = a.data();
      const double* __restrict pb = b.data();
      const double* __restrict pc = c.data();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    m.triad_gb_per_s = std::max(m.triad_gb_per_s, 3.0 * sizeof(double) * n / t.seconds() / 1e9);

    t.reset();
    parallel_chunks(0, n, [&](int64_t lo, int64_t hi, int thread) {
      const double* __restrict pb = b.data();
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = lo;
      for (; i + 4 <= hi; i += 4) {
        s0 += pb[i];
        s1 += pb[i + 1];
        s2 += pb[i + 2];
        s3 += pb[i + 3];
      }
      for (; i < hi; ++i) s0 += pb[i];
      partial[thread] = s0 + s1 + s2 + s3;
    });
    m.read_gb_per_s = std::max(m.read_gb_per_s, sizeof(double) * n / t.seconds() / 1e9);
  }
  // Keep the reads observable so the compiler cannot drop them.
  volatile double sink = 0;
  for (double p : partial) sink = sink + p;
  return m;
}

}  // namespace distllm
