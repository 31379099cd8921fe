#include "distllm/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/kernels/gemm.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels {

namespace scalar {

void matvec_rows(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight, const float* bias,
                 int M, int K, int n0, int n1) {
  for (int n = n0; n < n1; ++n) {
    const float* w = weight + static_cast<int64_t>(n) * K;
    for (int m = 0; m < M; ++m) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) s += inp[m * ldi + k] * w[k];
      out[m * ldo + (n - n0)] = s + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace scalar

namespace {

void matvec(float* out, int64_t ldo, const float* inp, int64_t ldi, const float* weight, const float* bias,
            int64_t M, int K, int N, bool accumulate) {
  auto kernel = use_avx2() ? avx2::matvec_rows : scalar::matvec_rows;
  constexpr int kRowsPerTask = 16;
  int64_t tasks = (N + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for(0, tasks, [&](int64_t t) {
    int n0 = static_cast<int>(t * kRowsPerTask);
    int n1 = std::min(N, n0 + kRowsPerTask);
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      int rows = static_cast<int>(std::min<int64_t>(4, M - m0));
      if (!accumulate) {
        kernel(out + m0 * ldo + n0, ldo, inp + m0 * ldi, ldi, weight, bias, rows, K, n0, n1);
      } else {
        float tmp[4 * kRowsPerTask];
        kernel(tmp, kRowsPerTask, inp + m0 * ldi, ldi, weight, nullptr, rows, K, n0, n1);
        for (int r = 0; r < rows; ++r)
          for (int n = n0; n < n1; ++n) out[(m0 + r) * ldo + n] += tmp[r * kRowsPerTask + n - n0];
      }
    }
  });
}

// DISTLLM_SGEMM as given: 1 distllm, 0 openblas, -1 not set. A bad value is an
// error naming the variable, not a silent fallback.
int sgemm_override() {
  static const int v = [] {
    const char* s = std::getenv("DISTLLM_SGEMM");
    if (!s || !*s) return -1;
    const std::string name(s);
    DL_CHECK(name == "distllm" || name == "openblas", "DISTLLM_SGEMM must be distllm or openblas, got '%s'", s);
    return name == "distllm" ? 1 : 0;
  }();
  return v;
}

// Decided per call: the ISA cap can change at run time (tests run every path).
bool use_own_sgemm() {
  const int v = sgemm_override();
  return v >= 0 ? v == 1 : use_avx512();
}

// C = A·op(B)-style product in the mode's dtype (row-major; ta/tb transpose A/B).
void gemm(ComputeDtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (dt == ComputeDtype::kBf16) {
    gemm_bf16(ta ? Trans::kT : Trans::kN, tb ? Trans::kT : Trans::kN, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  f32_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void f32_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (use_own_sgemm()) {
    sgemm(ta ? Trans::kT : Trans::kN, tb ? Trans::kT : Trans::kN, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb),
              beta, C, static_cast<int>(ldc));
}

const char* f32_gemm_path() {
  if (!use_own_sgemm()) return "openblas";
  return use_avx512() ? "distllm avx512" : use_avx2() ? "distllm avx2" : "distllm scalar";
}

const char* compute_dtype_name(ComputeDtype d) { return d == ComputeDtype::kBf16 ? "bf16" : "f32"; }

ComputeDtype parse_compute_dtype(const std::string& text) {
  if (text == "f32") return ComputeDtype::kF32;
  if (text == "bf16") return ComputeDtype::kBf16;
  throw_error("--compute-dtype must be f32 or bf16, got '" + text + "'");
}

void check_compute_dtype(ComputeDtype d) {
  DL_CHECK(d != ComputeDtype::kBf16 || gemm_bf16_available(),
           "--compute-dtype bf16 needs AVX512_BF16 (vdpbf16ps): %s; use --compute-dtype f32",
           gemm_bf16_unavailable_reason());
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M, int K, int N,
                    MatmulMode mode, int64_t ldi, int64_t ldo, bool accumulate) {
  if (ldi == 0) ldi = K;
  if (ldo == 0) ldo = N;
  if (M == 0 || N == 0) return;
  if (mode.layout == WeightLayout::kOutIn && mode.compute == ComputeDtype::kF32 && M < kMatvecMaxRows) {
    matvec(out, ldo, inp, ldi, weight, accumulate ? nullptr : bias, M, K, N, accumulate);
    return;
  }
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias && !accumulate) {
    parallel_for(0, M, [&](int64_t m) { std::memcpy(out + m * ldo, bias, sizeof(float) * N); });
    beta = 1.0f;
  }
  const bool in_out = mode.layout == WeightLayout::kInOut;
  gemm(mode.compute, false, !in_out, M, N, K, inp, ldi, weight, in_out ? N : K, beta, out, ldo);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t M, int K, int N,
                           MatmulMode mode, int64_t ld_dout, int64_t ld_dinp, bool accumulate) {
  if (ld_dout == 0) ld_dout = N;
  if (ld_dinp == 0) ld_dinp = K;
  if (M == 0) return;
  const bool in_out = mode.layout == WeightLayout::kInOut;
  gemm(mode.compute, false, in_out, M, K, N, dout, ld_dout, weight, in_out ? N : K, accumulate ? 1.0f : 0.0f, dinp,
       ld_dinp);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t M, int K,
                            int N, MatmulMode mode, int64_t ld_dout, int64_t ld_inp) {
  if (ld_dout == 0) ld_dout = N;
  if (ld_inp == 0) ld_inp = K;
  if (M == 0) return;
  if (dweight) {
    if (mode.layout == WeightLayout::kInOut)
      gemm(mode.compute, true, false, K, N, M, inp, ld_inp, dout, ld_dout, 1.0f, dweight, N);
    else
      gemm(mode.compute, true, false, N, K, M, dout, ld_dout, inp, ld_inp, 1.0f, dweight, K);
  }
  if (dbias) {
    // Column sums split by column block: fixed order, no sharing between threads.
    constexpr int kBlock = 256;
    int64_t blocks = (N + kBlock - 1) / kBlock;
    parallel_for(0, blocks, [&](int64_t b) {
      int n0 = static_cast<int>(b) * kBlock;
      int len = std::min(N, n0 + kBlock) - n0;
      for (int64_t m = 0; m < M; ++m) add_inplace(dbias + n0, dout + m * ld_dout + n0, len);
    });
  }
}

}  // namespace distllm::kernels
