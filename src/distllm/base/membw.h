// Measures this machine's memory bandwidth the way STREAM's triad does
// (a[i] = b[i] + s * c[i] over arrays far larger than the caches), using the
// configured threads. Benchmarks quote their rooflines against this figure.
#pragma once

namespace distllm {

struct MemoryBandwidth {
  double triad_gb_per_s = 0;  // bytes moved / time, counting 24 bytes per element as STREAM does
};

// Best of `reps` triad passes over arrays of `megabytes` each (default 256 MB).
MemoryBandwidth measure_memory_bandwidth(int megabytes = 256, int reps = 5);

}  // namespace distllm
