#include "distllm/kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace scalar {

void layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x, const float* w,
                   const float* b, int C, float eps) {
  float sum = 0.0f;
  for (int i = 0; i < C; ++i) sum += x[i];
  float mean = sum / C;
  float var = 0.0f;
  for (int i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
  float rstd = 1.0f / std::sqrt(var / C + eps);
  for (int i = 0; i < C; ++i) out[i] = (x[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0f);
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

void layernorm_backward_row(float* dx, const float* dout, const float* x, const float* w, float mean,
                            float rstd, int C) {
  float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
  for (int i = 0; i < C; ++i) {
    float dnorm = dout[i] * w[i];
    dnorm_mean += dnorm;
    dnorm_xhat_mean += dnorm * (x[i] - mean) * rstd;
  }
  dnorm_mean /= C;
  dnorm_xhat_mean /= C;
  for (int i = 0; i < C; ++i) {
    float xhat = (x[i] - mean) * rstd;
    dx[i] += rstd * (dout[i] * w[i] - dnorm_mean - xhat * dnorm_xhat_mean);
  }
}

void layernorm_param_grad_row(float* dw, float* db, const float* dout, const float* x, float mean, float rstd,
                              int n) {
  for (int i = 0; i < n; ++i) {
    if (dw) dw[i] += dout[i] * (x[i] - mean) * rstd;
    if (db) db[i] += dout[i];
  }
}

namespace {

// The weight a row is scaled by: w, or 1 + w for Gemma's norm.
template <bool kPlusOne>
inline float norm_weight(const float* w, int i) {
  if constexpr (kPlusOne) return 1.0f + w[i];
  else return w[i];
}

template <bool kPlusOne>
void rmsnorm_row_impl(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < C; ++i) ss += x[i] * x[i];
  float rstd = 1.0f / std::sqrt(ss / C + eps);
  for (int i = 0; i < C; ++i) out[i] = x[i] * rstd * norm_weight<kPlusOne>(w, i);
  if (rstd_out) *rstd_out = rstd;
}

template <bool kPlusOne>
void rmsnorm_backward_row_impl(float* dx, const float* dout, const float* x, const float* w, float rstd, int C) {
  float gx = 0.0f;
  for (int i = 0; i < C; ++i) gx += dout[i] * norm_weight<kPlusOne>(w, i) * x[i];
  float coef = rstd * rstd * gx / C;
  for (int i = 0; i < C; ++i) dx[i] += rstd * (dout[i] * norm_weight<kPlusOne>(w, i) - x[i] * coef);
}

}  // namespace

void rmsnorm_row(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
  rmsnorm_row_impl<false>(out, rstd_out, x, w, C, eps);
}

void rmsnorm_backward_row(float* dx, const float* dout, const float* x, const float* w, float rstd, int C) {
  rmsnorm_backward_row_impl<false>(dx, dout, x, w, rstd, C);
}

void rmsnorm_plus_one_row(float* out, float* rstd_out, const float* x, const float* w, int C, float eps) {
  rmsnorm_row_impl<true>(out, rstd_out, x, w, C, eps);
}

void rmsnorm_plus_one_backward_row(float* dx, const float* dout, const float* x, const float* w, float rstd,
                                   int C) {
  rmsnorm_backward_row_impl<true>(dx, dout, x, w, rstd, C);
}

void rmsnorm_param_grad_row(float* dw, const float* dout, const float* x, float rstd, int n) {
  for (int i = 0; i < n; ++i) dw[i] += dout[i] * x[i] * rstd;
}

}  // namespace scalar

namespace {

// Parameter gradients are column sums over all rows. Splitting by column block
// (not by row) keeps each thread's partial sums private and the summation order
// fixed, so results are identical for any thread count.
constexpr int kColumnBlock = 128;

template <typename RowFn>
void for_column_blocks(int C, RowFn&& fn) {
  int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
  parallel_for(0, blocks, [&](int64_t blk) {
    int c0 = static_cast<int>(blk) * kColumnBlock;
    fn(c0, std::min(C, c0 + kColumnBlock));
  });
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C, float eps) {
  bool simd = use_avx2();
  parallel_for(0, N, [&](int64_t n) {
    auto row = simd ? avx2::layernorm_row : scalar::layernorm_row;
    row(out + n * C, mean ? mean + n : nullptr, rstd ? rstd + n : nullptr, inp + n * C, weight, bias, C, eps);
  });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int C) {
  bool simd = use_avx2();
  parallel_for(0, N, [&](int64_t n) {
    auto row = simd ? avx2::layernorm_backward_row : scalar::layernorm_backward_row;
    row(dinp + n * C, dout + n * C, inp + n * C, weight, mean[n], rstd[n], C);
  });
  if (dweight == nullptr && dbias == nullptr) return;
  for_column_blocks(C, [&](int c0, int c1) {
    auto row = simd ? avx2::layernorm_param_grad_row : scalar::layernorm_param_grad_row;
    for (int64_t n = 0; n < N; ++n)
      row(dweight ? dweight + c0 : nullptr, dbias ? dbias + c0 : nullptr, dout + n * C + c0, inp + n * C + c0,
          mean[n], rstd[n], c1 - c0);
  });
}

namespace {

using RmsRow = void (*)(float*, float*, const float*, const float*, int, float);
using RmsBackwardRow = void (*)(float*, const float*, const float*, const float*, float, int);

void rmsnorm_rows(RmsRow row, float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                  float eps) {
  parallel_for(0, N, [&](int64_t n) { row(out + n * C, rstd ? rstd + n : nullptr, inp + n * C, weight, C, eps); });
}

void rmsnorm_backward_rows(RmsBackwardRow row, float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int64_t N, int C) {
  parallel_for(0, N, [&](int64_t n) { row(dinp + n * C, dout + n * C, inp + n * C, weight, rstd[n], C); });
  if (dweight == nullptr) return;
  const bool simd = use_avx2();
  for_column_blocks(C, [&](int c0, int c1) {
    auto grad = simd ? avx2::rmsnorm_param_grad_row : scalar::rmsnorm_param_grad_row;
    for (int64_t n = 0; n < N; ++n) grad(dweight + c0, dout + n * C + c0, inp + n * C + c0, rstd[n], c1 - c0);
  });
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                     float eps) {
  rmsnorm_rows(use_avx2() ? avx2::rmsnorm_row : scalar::rmsnorm_row, out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int C) {
  rmsnorm_backward_rows(use_avx2() ? avx2::rmsnorm_backward_row : scalar::rmsnorm_backward_row, dinp, dweight, dout,
                        inp, weight, rstd, N, C);
}

void rmsnorm_plus_one_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                              float eps) {
  rmsnorm_rows(use_avx2() ? avx2::rmsnorm_plus_one_row : scalar::rmsnorm_plus_one_row, out, rstd, inp, weight, N, C,
               eps);
}

void rmsnorm_plus_one_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int64_t N, int C) {
  rmsnorm_backward_rows(use_avx2() ? avx2::rmsnorm_plus_one_backward_row : scalar::rmsnorm_plus_one_backward_row,
                        dinp, dweight, dout, inp, weight, rstd, N, C);
}

void head_rmsnorm_forward(float* x, int64_t rows, int64_t stride, int heads, int D, const float* weight, float eps,
                          float* saved, float* rstd) {
  const bool simd = use_avx2();
  parallel_for(0, rows, [&](int64_t r) {
    auto row = simd ? avx2::rmsnorm_row : scalar::rmsnorm_row;
    for (int h = 0; h < heads; ++h) {
      float* head = x + r * stride + static_cast<int64_t>(h) * D;
      const int64_t k = r * heads + h;
      if (saved) std::memcpy(saved + k * D, head, sizeof(float) * static_cast<size_t>(D));
      // In place: the row kernel reads each element before it writes it.
      row(head, rstd ? rstd + k : nullptr, saved ? saved + k * D : head, weight, D, eps);
    }
  });
}

void head_rmsnorm_backward(float* d, int64_t rows, int64_t stride, int heads, int D, const float* weight,
                           const float* saved, const float* rstd, float* dweight) {
  const bool simd = use_avx2();
  if (dweight) {
    // The weight's gradient first: it needs d(out), which the input gradient replaces.
    for_column_blocks(D, [&](int c0, int c1) {
      auto row = simd ? avx2::rmsnorm_param_grad_row : scalar::rmsnorm_param_grad_row;
      for (int64_t r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h) {
          const int64_t k = r * heads + h;
          row(dweight + c0, d + r * stride + static_cast<int64_t>(h) * D + c0, saved + k * D + c0, rstd[k], c1 - c0);
        }
    });
  }
  parallel_for(0, rows, [&](int64_t r) {
    auto row = simd ? avx2::rmsnorm_backward_row : scalar::rmsnorm_backward_row;
    std::vector<float> dout(static_cast<size_t>(D));
    for (int h = 0; h < heads; ++h) {
      float* head = d + r * stride + static_cast<int64_t>(h) * D;
      const int64_t k = r * heads + h;
      std::memcpy(dout.data(), head, sizeof(float) * static_cast<size_t>(D));
      std::memset(head, 0, sizeof(float) * static_cast<size_t>(D));
      row(head, dout.data(), saved + k * D, weight, rstd[k], D);
    }
  });
}

}  // namespace distllm::kernels
