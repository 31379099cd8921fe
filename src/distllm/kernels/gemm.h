// distllm's own single-precision GEMM for training and prefill.
//
//   C[M, N] = alpha · op(A) · op(B) + beta · C      (row-major, leading dimensions)
//
// op(A) is [M, K]: A itself (Trans::kN, A is M x K, lda >= K) or A^T (Trans::kT, A is
// K x M, lda >= M); likewise op(B) is [K, N]. beta == 0 never reads C (it may hold
// NaN); any other beta scales what C holds.
//
// Structure (Goto/BLIS): the K dimension is cut into KC-deep slices and C into
// MC x NC blocks; a KC x NC slice of op(B) is packed into NR-wide column panels and
// an MC x KC slice of op(A) into MR-tall row panels, so a register-blocked MR x NR
// micro-kernel streams both from contiguous memory (A's micro-panel stays in L1
// across a row of C tiles, B's slice in L2). Threads split C into a 2-D grid of
// tiles (one per thread), each running the blocked loops with its own packing
// buffers, which live as long as the thread (repeated calls allocate nothing). The micro-kernel is chosen at run time from
// use_avx512() / use_avx2(); the scalar one is the portable reference.
//
// gemm_bf16 runs the same driver with bf16 compute: op(A) and op(B) are rounded to
// bf16 (nearest even) as they are packed, and the AVX512_BF16 micro-kernel sums
// their products in f32 (vdpbf16ps); C, alpha and beta stay f32. Each product then
// carries the two inputs' rounding (relative 2^-8 each), not f32's; the sums do not
// lose more than sgemm's. It exists only where the CPU has AVX512_BF16 and the
// active ISA level is avx512 (it has no fallback: callers ask gemm_bf16_available()).
#pragma once

#include <cstdint>

namespace distllm::kernels {

enum class Trans { kN, kT };

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Same arguments and contract as sgemm. Throws (naming the missing feature or the
// ISA cap) where gemm_bf16_available() is false.
void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// cpu_features().avx512_bf16 and use_avx512().
bool gemm_bf16_available();
// Why it is not available ("" when it is), for error messages.
const char* gemm_bf16_unavailable_reason();

// The blocking the active ISA level uses (for benchmarks and docs); kc counts k
// values (bf16 panels hold kc / 2 words of k pairs).
struct GemmBlocking {
  int mr, nr, kc, mc, nc;
  const char* isa;
};
GemmBlocking gemm_blocking();
GemmBlocking gemm_bf16_blocking();

namespace detail {
// C[0:MR, 0:NR] = alpha · Σ_k a[k·MR + i] · b[k·NR + j] + beta · C (beta == 0: C not read).
// a and b are packed panels, 64-byte aligned, kc words deep; a word is one f32, or
// for the bf16 kernel a pair of bf16 (two k), so a bf16 kernel's kc is the pairs.
using GemmMicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                                 float beta);
namespace avx2 {
constexpr int kMR = 6, kNR = 16;
void gemm_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta);
}  // namespace avx2
// A 12 x 32 micro-kernel (24 zmm accumulators) and its vectorised packing of
// op(A)[i0 : i0+mc, k0 : k0+kc] and op(B)[k0 : k0+kc, j0 : j0+nc] (the generic
// packing's panel layout in gemm.cpp, counted in the kernel's words).
#define DISTLLM_GEMM_AVX512_KERNEL                                                                                  \
  constexpr int kMR = 12, kNR = 32;                                                                               \
  void gemm_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta);   \
  void pack_a(float* dst, const float* A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t k0, int64_t kc); \
  void pack_b(float* dst, const float* B, int64_t ldb, bool trans, int64_t k0, int64_t kc, int64_t j0, int64_t nc);
namespace avx512 {  // f32 words
DISTLLM_GEMM_AVX512_KERNEL
}
namespace avx512_bf16 {  // words of k pairs rounded to bf16 (ceil(kc / 2) deep)
DISTLLM_GEMM_AVX512_KERNEL
}
}  // namespace detail

}  // namespace distllm::kernels
