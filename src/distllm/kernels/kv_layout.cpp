#include "distllm/kernels/kv_layout.h"

#include <algorithm>
#include <cmath>

namespace distllm::kernels {

namespace {

void quantize_int8(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  // Dividing by the scale (not multiplying by its inverse) puts the largest value
  // on exactly +-127; clamping still guards the other values' rounding.
  for (int i = 0; i < n; ++i) {
    const float r = scale > 0.0f ? std::nearbyint(x[i] / scale) : 0.0f;
    q[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
  std::memcpy(q + n, &scale, sizeof scale);
}

}  // namespace

void kv_store_slice(DType dtype, const float* x, int head_dim, void* dst) {
  switch (dtype) {
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int i = 0; i < head_dim; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case DType::kI8: quantize_int8(x, head_dim, static_cast<int8_t*>(dst)); return;
    default: std::memcpy(dst, x, sizeof(float) * head_dim); return;
  }
}

void kv_load_slice(DType dtype, const void* src, int head_dim, float* x) {
  switch (dtype) {
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int i = 0; i < head_dim; ++i) x[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kI8: {
      const auto* q = static_cast<const int8_t*>(src);
      const float scale = kv_slice_scale(q, head_dim);
      for (int i = 0; i < head_dim; ++i) x[i] = static_cast<float>(q[i]) * scale;
      return;
    }
    default: std::memcpy(x, src, sizeof(float) * head_dim); return;
  }
}

}  // namespace distllm::kernels
