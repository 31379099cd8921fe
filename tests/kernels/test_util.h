// Helpers shared by kernel tests.
#pragma once

#include <cmath>
#include <vector>

#include "distllm/base/rng.h"

namespace distllm::testing {

inline std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f) {
  CounterRng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal() * scale;
  return v;
}

// ||a - b|| / ||b|| (0 when both are zero).
inline double rel_error(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_error(a.data(), b.data(), a.size());
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace distllm::testing
