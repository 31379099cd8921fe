// Rotary position embedding, Hugging Face Llama convention ("rotate_half"): each head
// of size D is split into halves x1 = x[:D/2], x2 = x[D/2:], and at position p
//   out1 = x1*cos - x2*sin,  out2 = x2*cos + x1*sin,
// with angle p * theta^(-2i/D) for i in [0, D/2).
#pragma once

#include <cstdint>
#include <vector>

namespace distllm::kernels {

// The inverse frequencies theta^(-2i/D), i in [0, D/2), in float32 as transformers
// computes them (the start of every RoPE variant; model/rope_scaling.h scales them).
std::vector<float> rope_inverse_frequencies(int head_dim, double theta);

// cos/sin for positions [0, max_pos), each row D/2 wide. Computed the way
// transformers does it in float32 (inverse frequency, then position * inv_freq,
// cos and sin times the attention factor), so long-context angles round the same way.
struct RopeTable {
  int head_dim = 0;
  int max_pos = 0;
  std::vector<float> cos;  // [max_pos, head_dim/2]
  std::vector<float> sin;

  RopeTable() = default;
  RopeTable(int head_dim, int max_pos, double theta);
  // From inverse frequencies (D/2 of them). Positions from `switch_at` on use
  // `inv_freq_after` instead when it is given (LongRoPE's long factors).
  RopeTable(int head_dim, int max_pos, const std::vector<float>& inv_freq, float attention_factor = 1.0f,
            int switch_at = -1, const std::vector<float>* inv_freq_after = nullptr);
};

// Rotates n_heads consecutive heads in each of `rows` rows (row stride `stride`
// floats) in place, row r at position positions[r]. inverse=true applies the
// transpose rotation (the backward pass).
void rope_apply(float* x, int64_t rows, int64_t stride, int n_heads, const int32_t* positions,
                const RopeTable& table, bool inverse);

#define DISTLLM_ROPE_KERNELS \
  void rope_head(float* x, const float* cos, const float* sin, int half, bool inverse);

namespace scalar {
DISTLLM_ROPE_KERNELS
}
namespace avx2 {
DISTLLM_ROPE_KERNELS
}

}  // namespace distllm::kernels
