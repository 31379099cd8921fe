// Matrix multiply for linear layers, forward and backward.
//
// Weights come in the two layouts Hugging Face checkpoints use:
//   kInOut: W is [K, N] (in, out)  -- GPT-2's Conv1D
//   kOutIn: W is [N, K] (out, in)  -- torch.nn.Linear (Llama)
// Large products go to an sgemm (f32_gemm_path(): distllm's own on AVX-512, else
// OpenBLAS); small row counts (decode) use a hand-written matrix-vector kernel that
// streams each weight row once. With ComputeDtype::kBf16
// every product goes to kernels::gemm_bf16 instead (bf16 inputs, f32 sums; inputs,
// outputs and gradients stay f32 in memory): training's --compute-dtype bf16.
#pragma once

#include <cstdint>
#include <string>

namespace distllm::kernels {

enum class WeightLayout { kInOut, kOutIn };

enum class ComputeDtype { kF32, kBf16 };
const char* compute_dtype_name(ComputeDtype d);  // "f32", "bf16"
// "f32" or "bf16"; throws naming --compute-dtype and the value otherwise.
ComputeDtype parse_compute_dtype(const std::string& text);
// Throws, naming --compute-dtype and the reason, when this process cannot compute
// in `d` (bf16 needs AVX512_BF16 and the avx512 ISA level).
void check_compute_dtype(ComputeDtype d);

// Which sgemm the f32 products of training run on: "distllm avx512" where the
// active ISA is AVX-512 (its own GEMM: as fast as OpenBLAS's AVX-512 kernel on the
// training shapes, and twice OpenBLAS where the environment pins OpenBLAS to its
// Haswell kernel), else "openblas". DISTLLM_SGEMM=openblas|distllm overrides it
// (read once); distllm below AVX-512 runs its AVX2 or scalar GEMM.
const char* f32_gemm_path();

// C = alpha * op(A) * op(B) + beta * C, row-major, on f32_gemm_path()'s sgemm: every
// f32 product of training (the linears' and attention's) goes through here. From
// inside a parallel loop it runs on the calling thread alone.
void f32_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// How a linear layer's products run: the weight's layout and the compute dtype. A
// WeightLayout converts to it (f32 compute), so callers that only know the layout
// pass that.
struct MatmulMode {
  WeightLayout layout;
  ComputeDtype compute = ComputeDtype::kF32;
  MatmulMode(WeightLayout l, ComputeDtype c = ComputeDtype::kF32) : layout(l), compute(c) {}  // NOLINT: implicit
};

// out[M, N] = inp[M, K] · W + bias. Row strides: ldi for inp, ldo for out (0 = dense).
// accumulate=true adds into out instead of overwriting (bias is then not added).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M, int K,
                    int N, MatmulMode mode, int64_t ldi = 0, int64_t ldo = 0, bool accumulate = false);

// dinp[M, K] (=, or += when accumulate) dout[M, N] · W^T.
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t M, int K, int N,
                           MatmulMode mode, int64_t ld_dout = 0, int64_t ld_dinp = 0, bool accumulate = false);

// dweight += inp^T · dout (in the weight's own layout); dbias[n] += sum_m dout[m, n].
// Either output may be null.
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t M, int K,
                            int N, MatmulMode mode, int64_t ld_dout = 0, int64_t ld_inp = 0);

// Below this many rows, kOutIn products in f32 take the matrix-vector path.
constexpr int64_t kMatvecMaxRows = 8;

#define DISTLLM_MATVEC_KERNELS                                                                  \
  /* out[m, n - n0] = dot(inp[m, :], W[n, :]) (+ bias[n]) for m < M <= 4, n in [n0, n1); W is [N, K] */ \
  void matvec_rows(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight, \
                   const float* bias, int M, int K, int n0, int n1);

namespace scalar {
DISTLLM_MATVEC_KERNELS
}
namespace avx2 {
DISTLLM_MATVEC_KERNELS
}

}  // namespace distllm::kernels
