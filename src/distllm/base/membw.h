// Measures this machine's memory bandwidth with the configured threads, over arrays
// far larger than the caches. Benchmarks quote their rooflines against it.
#pragma once

namespace distllm {

struct MemoryBandwidth {
  double triad_gb_per_s = 0;  // STREAM triad a = b + s*c, counting 24 bytes per element as STREAM does
  double read_gb_per_s = 0;   // read-only: summing one array (what streaming weights needs)
};

// Best of `reps` passes of each kind over arrays of `megabytes` each.
MemoryBandwidth measure_memory_bandwidth(int megabytes = 256, int reps = 5);

}  // namespace distllm
