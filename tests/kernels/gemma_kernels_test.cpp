// Gemma's kernels: the RMSNorm scaled by 1 + w, the GeGLU MLP gate (tanh GELU) and
// the logit soft-cap, against double-precision references and finite differences,
// and every AVX2 row kernel against its scalar one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/kernels/activation.h"
#include "distllm/kernels/logit_softcap.h"
#include "distllm/kernels/norm.h"
#include "kernels/test_util.h"

namespace distllm::kernels {
namespace {

using distllm::testing::random_vector;
using distllm::testing::rel_error;

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

TEST(GemmaKernels, RmsNormPlusOneIsThePlainNormOfOnePlusW) {
  const int N = 3, C = 37;
  auto x = random_vector(N * C, 1, 2.0f), w = random_vector(C, 2, 0.3f), dout = random_vector(N * C, 3);
  std::vector<float> one_plus(C);
  for (int c = 0; c < C; ++c) one_plus[c] = 1.0f + w[c];
  std::vector<float> out(N * C), rstd(N), ref(N * C), ref_rstd(N);
  rmsnorm_plus_one_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  rmsnorm_forward(ref.data(), ref_rstd.data(), x.data(), one_plus.data(), N, C, 1e-6f);
  EXPECT_LT(rel_error(out, ref), 1e-6);
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += double(x[n * C + c]) * x[n * C + c];
    const double r = 1 / std::sqrt(ss / C + 1e-6);
    EXPECT_NEAR(rstd[n], r, 1e-6 * r);
    for (int c = 0; c < C; ++c) EXPECT_NEAR(out[n * C + c], x[n * C + c] * r * (1 + w[c]), 1e-5);
  }
  // The gradients: d(in) as the plain norm's with 1 + w, d(w) as d(1 + w).
  std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f), rdx(N * C, 0.5f), rdw(C, 0.25f);
  rmsnorm_plus_one_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  rmsnorm_backward(rdx.data(), rdw.data(), dout.data(), x.data(), one_plus.data(), ref_rstd.data(), N, C);
  EXPECT_LT(rel_error(dx, rdx), 1e-6);
  EXPECT_LT(rel_error(dw, rdw), 1e-6);
}

TEST(GemmaKernels, RmsNormPlusOneBackwardMatchesFiniteDifferences) {
  const int N = 2, C = 13;
  auto x = random_vector(N * C, 4), w = random_vector(C, 5, 0.3f), dout = random_vector(N * C, 6);
  std::vector<float> out(N * C), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f);
  rmsnorm_plus_one_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  rmsnorm_plus_one_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  auto objective = [&](const std::vector<float>& xx, const std::vector<float>& ww) {
    std::vector<float> o(N * C);
    rmsnorm_plus_one_forward(o.data(), nullptr, xx.data(), ww.data(), N, C, 1e-6f);
    double s = 0;
    for (int i = 0; i < N * C; ++i) s += double(o[i]) * dout[i];
    return s;
  };
  const float h = 1e-2f;
  for (int i = 0; i < N * C; ++i) {
    auto xp = x, xm = x;
    xp[i] += h, xm[i] -= h;
    EXPECT_NEAR(dx[i], (objective(xp, w) - objective(xm, w)) / (2 * h), 2e-3);
  }
  for (int c = 0; c < C; ++c) {
    auto wp = w, wm = w;
    wp[c] += h, wm[c] -= h;
    EXPECT_NEAR(dw[c], (objective(x, wp) - objective(x, wm)) / (2 * h), 2e-3);
  }
}

TEST(GemmaKernels, GegluForwardAndBackward) {
  const int rows = 3, I = 11;
  auto gu = random_vector(rows * 2 * I, 7, 3.0f), dout = random_vector(rows * I, 8);
  std::vector<float> out(rows * I), dgu(rows * 2 * I);
  geglu_forward(out.data(), gu.data(), rows, I);
  geglu_backward(dgu.data(), gu.data(), dout.data(), rows, I);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < I; ++i) {
      const double g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i], d = dout[r * I + i];
      EXPECT_NEAR(out[r * I + i], gelu_tanh(g) * u, 1e-5);
      EXPECT_NEAR(dgu[r * 2 * I + I + i], d * gelu_tanh(g), 1e-5);
      EXPECT_NEAR(dgu[r * 2 * I + i], d * u * (gelu_tanh(g + 1e-5) - gelu_tanh(g - 1e-5)) / 2e-5, 1e-4);
    }
}

TEST(GemmaKernels, LogitSoftcapForwardAndBackward) {
  const int n = 1001;  // several SIMD blocks and a tail
  for (float cap : {0.5f, 30.0f}) {
    auto x = random_vector(n, 9, 40.0f), d = random_vector(n, 10);
    auto y = x;
    logit_softcap_forward(y.data(), n, cap);
    auto g = d;
    logit_softcap_backward(g.data(), y.data(), n, cap);
    for (int i = 0; i < n; ++i) {
      const double t = std::tanh(double(x[i]) / cap);
      EXPECT_NEAR(y[i], cap * t, 2e-6 * cap);
      EXPECT_LT(std::fabs(y[i]), cap * (1 + 1e-6));
      EXPECT_NEAR(g[i], d[i] * (1 - t * t), 2e-5);
    }
  }
}

TEST(GemmaKernels, Avx2RowsMatchScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "CPU has no AVX2+FMA: only the scalar path runs here";
  for (int C : {1, 7, 8, 9, 33, 257}) {
    SCOPED_TRACE(C);
    auto x = random_vector(C, 11, 2.0f), w = random_vector(C, 12, 0.3f), d = random_vector(C, 13);
    auto u = random_vector(C, 14);
    std::vector<float> o1(C), o2(C);
    float r1, r2;
    avx2::rmsnorm_plus_one_row(o1.data(), &r1, x.data(), w.data(), C, 1e-6f);
    scalar::rmsnorm_plus_one_row(o2.data(), &r2, x.data(), w.data(), C, 1e-6f);
    EXPECT_LT(rel_error(o1, o2), 1e-5);
    EXPECT_NEAR(r1, r2, 1e-5 * r2);
    std::vector<float> dx1(C, 0.25f), dx2(C, 0.25f);
    avx2::rmsnorm_plus_one_backward_row(dx1.data(), d.data(), x.data(), w.data(), r2, C);
    scalar::rmsnorm_plus_one_backward_row(dx2.data(), d.data(), x.data(), w.data(), r2, C);
    EXPECT_LT(rel_error(dx1, dx2), 1e-5);
    avx2::geglu_row(o1.data(), x.data(), u.data(), C);
    scalar::geglu_row(o2.data(), x.data(), u.data(), C);
    EXPECT_LT(rel_error(o1, o2), 1e-6);
    std::vector<float> g1(C), g2(C);
    avx2::geglu_backward_row(g1.data(), o1.data(), x.data(), u.data(), d.data(), C);
    scalar::geglu_backward_row(g2.data(), o2.data(), x.data(), u.data(), d.data(), C);
    EXPECT_LT(rel_error(g1, g2), 1e-6);
    EXPECT_LT(rel_error(o1, o2), 1e-6);
    auto y1 = x, y2 = x;
    avx2::logit_softcap_forward(y1.data(), C, 1.5f);
    scalar::logit_softcap_forward(y2.data(), C, 1.5f);
    EXPECT_LT(rel_error(y1, y2), 1e-6);
    auto b1 = d, b2 = d;
    avx2::logit_softcap_backward(b1.data(), y2.data(), C, 1.5f);
    scalar::logit_softcap_backward(b2.data(), y2.data(), C, 1.5f);
    EXPECT_LT(rel_error(b1, b2), 1e-6);
  }
}

}  // namespace
}  // namespace distllm::kernels
