// Small statistics shared by the benchmark commands.
#pragma once

#include <algorithm>
#include <vector>

namespace distllm {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace distllm
