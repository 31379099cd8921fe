#include "distllm/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
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

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M, int K, int N,
                    WeightLayout layout, int64_t ldi, int64_t ldo, bool accumulate) {
  if (ldi == 0) ldi = K;
  if (ldo == 0) ldo = N;
  if (M == 0 || N == 0) return;
  if (layout == WeightLayout::kOutIn && M < kMatvecMaxRows) {
    matvec(out, ldo, inp, ldi, weight, accumulate ? nullptr : bias, M, K, N, accumulate);
    return;
  }
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias && !accumulate) {
    parallel_for(0, M, [&](int64_t m) { std::memcpy(out + m * ldo, bias, sizeof(float) * N); });
    beta = 1.0f;
  }
  if (layout == WeightLayout::kInOut) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, inp, ldi, weight, N, beta, out, ldo);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, inp, ldi, weight, K, beta, out, ldo);
  }
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t M, int K, int N,
                           WeightLayout layout, int64_t ld_dout, int64_t ld_dinp, bool accumulate) {
  if (ld_dout == 0) ld_dout = N;
  if (ld_dinp == 0) ld_dinp = K;
  if (M == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (layout == WeightLayout::kInOut) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, dout, ld_dout, weight, N, beta, dinp,
                ld_dinp);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dout, ld_dout, weight, K, beta, dinp,
                ld_dinp);
  }
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t M, int K,
                            int N, WeightLayout layout, int64_t ld_dout, int64_t ld_inp) {
  if (ld_dout == 0) ld_dout = N;
  if (ld_inp == 0) ld_inp = K;
  if (M == 0) return;
  if (dweight) {
    if (layout == WeightLayout::kInOut) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, inp, ld_inp, dout, ld_dout, 1.0f,
                  dweight, N);
    } else {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dout, ld_dout, inp, ld_inp, 1.0f,
                  dweight, K);
    }
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
