// Counter-based random numbers: value i of stream s under seed k is a pure function
// of (k, s, i). Any rank, thread, or restarted process reproduces exactly the same
// numbers by knowing those three integers, with no generator state to ship around.
#pragma once

#include <cmath>
#include <cstdint>

namespace distllm {

// SplitMix64 finaliser: a strong 64-bit mixing function.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream = 0, uint64_t counter = 0)
      : key_(mix64(seed ^ mix64(stream + 0x632BE59BD9B4E019ull))), counter_(counter) {}

  uint64_t next_u64() { return mix64(key_ ^ mix64(counter_++)); }
  // Uniform in [0, 1) with 24 bits of precision (exactly representable in float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
  // Standard normal via Box-Muller (uses two draws).
  float normal() {
    double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = uniform_double();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t c) { counter_ = c; }

 private:
  uint64_t key_;
  uint64_t counter_;
};

}  // namespace distllm
