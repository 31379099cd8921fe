// GELU (tanh approximation, GPT-2's "gelu_new"), SwiGLU (Llama's SiLU-gated MLP) and
// GeGLU (Gemma's MLP gated by the tanh GELU).
#pragma once

#include <cstdint>

namespace distllm::kernels {

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = dout * gelu'(inp)  (overwrites; dinp may alias dout)
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// gate_up is [rows, 2*I]: gate in columns [0, I), up in [I, 2I) (the output of one
// matmul over the adjacent gate_proj and up_proj weights). out[rows, I] = silu(gate)*up.
void swiglu_forward(float* out, const float* gate_up, int64_t rows, int I);
// Writes d(gate_up) [rows, 2I] from dout [rows, I].
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int I);

// The same with the tanh GELU as the gate: out[rows, I] = gelu_tanh(gate) * up.
void geglu_forward(float* out, const float* gate_up, int64_t rows, int I);
void geglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int I);

#define DISTLLM_ACTIVATION_KERNELS                                                             \
  void gelu_forward(float* out, const float* inp, int64_t n);                                  \
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);             \
  void swiglu_row(float* out, const float* gate, const float* up, int n);                      \
  void swiglu_backward_row(float* dgate, float* dup, const float* gate, const float* up,       \
                           const float* dout, int n);                                          \
  void geglu_row(float* out, const float* gate, const float* up, int n);                       \
  void geglu_backward_row(float* dgate, float* dup, const float* gate, const float* up,        \
                          const float* dout, int n);

namespace scalar {
DISTLLM_ACTIVATION_KERNELS
}
namespace avx2 {
DISTLLM_ACTIVATION_KERNELS
}

}  // namespace distllm::kernels
