#include "distllm/kernels/rope.h"

#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

std::vector<float> rope_inverse_frequencies(int head_dim, double theta) {
  DL_CHECK(head_dim % 2 == 0, "rope needs an even head dimension, got %d", head_dim);
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float base_pow = static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    inv_freq[static_cast<size_t>(i)] = 1.0f / base_pow;
  }
  return inv_freq;
}

RopeTable::RopeTable(int head_dim_, int max_pos_, double theta)
    : RopeTable(head_dim_, max_pos_, rope_inverse_frequencies(head_dim_, theta)) {}

RopeTable::RopeTable(int head_dim_, int max_pos_, const std::vector<float>& inv_freq, float attention_factor,
                     int switch_at, const std::vector<float>* inv_freq_after)
    : head_dim(head_dim_), max_pos(max_pos_) {
  DL_CHECK(head_dim % 2 == 0, "rope needs an even head dimension, got %d", head_dim);
  const int half = head_dim / 2;
  DL_CHECK(static_cast<int>(inv_freq.size()) == half && (!inv_freq_after || static_cast<int>(inv_freq_after->size()) == half),
           "rope: %zu inverse frequencies for a head dimension of %d", inv_freq.size(), head_dim);
  cos.resize(static_cast<size_t>(max_pos) * half);
  sin.resize(static_cast<size_t>(max_pos) * half);
  for (int p = 0; p < max_pos; ++p) {
    const std::vector<float>& f = inv_freq_after && switch_at >= 0 && p >= switch_at ? *inv_freq_after : inv_freq;
    for (int i = 0; i < half; ++i) {
      float angle = static_cast<float>(p) * f[static_cast<size_t>(i)];
      float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      cos[static_cast<size_t>(p) * half + i] = attention_factor == 1.0f ? c : c * attention_factor;
      sin[static_cast<size_t>(p) * half + i] = attention_factor == 1.0f ? s : s * attention_factor;
    }
  }
}

namespace scalar {

void rope_head(float* x, const float* cos, const float* sin, int half, bool inverse) {
  for (int i = 0; i < half; ++i) {
    float x1 = x[i], x2 = x[i + half];
    float s = inverse ? -sin[i] : sin[i];
    x[i] = x1 * cos[i] - x2 * s;
    x[i + half] = x2 * cos[i] + x1 * s;
  }
}

}  // namespace scalar

void rope_apply(float* x, int64_t rows, int64_t stride, int n_heads, const int32_t* positions,
                const RopeTable& table, bool inverse) {
  int half = table.head_dim / 2;
  bool simd = use_avx2();
  // Validate before the parallel region: exceptions must not escape OpenMP threads.
  for (int64_t r = 0; r < rows; ++r)
    DL_CHECK(positions[r] >= 0 && positions[r] < table.max_pos, "rope position %d outside [0, %d)",
             positions[r], table.max_pos);
  parallel_for(0, rows, [&](int64_t r) {
    int32_t p = positions[r];
    const float* c = table.cos.data() + static_cast<size_t>(p) * half;
    const float* s = table.sin.data() + static_cast<size_t>(p) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + r * stride + static_cast<int64_t>(h) * table.head_dim;
      (simd ? avx2::rope_head : scalar::rope_head)(head, c, s, half, inverse);
    }
  });
}

}  // namespace distllm::kernels
