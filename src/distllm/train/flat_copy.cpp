#include "distllm/train/flat_copy.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/parallel.h"

namespace distllm {

void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
}

void fill_zero(float* p, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  parallel_for(0, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    int64_t lo = c * kChunk;
    std::memset(p + lo, 0, sizeof(float) * static_cast<size_t>(std::min(n, lo + kChunk) - lo));
  });
}

}  // namespace distllm
