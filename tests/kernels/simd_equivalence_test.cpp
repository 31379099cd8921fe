// Every AVX2 kernel against its scalar reference on random inputs, including
// lengths that are not a multiple of 8 and length 1.
#include <gtest/gtest.h>

#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/kernels/activation.h"
#include "distllm/kernels/adamw.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/matmul.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/rope.h"
#include "distllm/kernels/vec.h"
#include "kernels/test_util.h"

namespace distllm::kernels {
namespace {

using distllm::testing::random_vector;
using distllm::testing::rel_error;

const int kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 1000, 1023};

class SimdEquivalence : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_avx2()) GTEST_SKIP() << "CPU has no AVX2+FMA: only the scalar path runs here";
  }
};

TEST_F(SimdEquivalence, VectorPrimitives) {
  for (int n : kLengths) {
    SCOPED_TRACE(n);
    auto a = random_vector(n, 1), b = random_vector(n, 2);
    EXPECT_NEAR(avx2::dot(a.data(), b.data(), n), scalar::dot(a.data(), b.data(), n), 1e-4 * std::sqrt(n));
    EXPECT_NEAR(avx2::sum_squares(a.data(), n), scalar::sum_squares(a.data(), n), 1e-9 * n);
    EXPECT_EQ(avx2::max_value(a.data(), n), scalar::max_value(a.data(), n));

    auto y1 = a, y2 = a;
    avx2::axpy(y1.data(), 0.37f, b.data(), n);
    scalar::axpy(y2.data(), 0.37f, b.data(), n);
    EXPECT_LT(rel_error(y1, y2), 1e-6);
    avx2::scale(y1.data(), -1.5f, n);
    scalar::scale(y2.data(), -1.5f, n);
    EXPECT_LT(rel_error(y1, y2), 1e-6);
    std::vector<float> o1(n), o2(n);
    avx2::add(o1.data(), a.data(), b.data(), n);
    scalar::add(o2.data(), a.data(), b.data(), n);
    EXPECT_EQ(o1, o2);

    auto s1 = a, s2 = a;
    float l1 = avx2::softmax_inplace(s1.data(), n);
    float l2 = scalar::softmax_inplace(s2.data(), n);
    EXPECT_NEAR(l1, l2, 1e-5);
    EXPECT_LT(rel_error(s1, s2), 1e-6);
  }
}

TEST_F(SimdEquivalence, ExpAndTanhAcrossRange) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0137f) x.push_back(v);
  for (float v : {-87.5f, -87.3f, 88.7f, 88.8f, 0.0f, -0.0f, 1e-30f, -1e-8f, 3e-3f}) x.push_back(v);
  auto e = x;
  avx2::exp_inplace(e.data(), static_cast<int64_t>(e.size()));
  auto t = x;
  avx2::tanh_inplace(t.data(), static_cast<int64_t>(t.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    double ref = std::exp(static_cast<double>(x[i]));
    if (ref < 1e-37) {
      EXPECT_LE(e[i], 1e-37) << x[i];
    } else if (ref > 3e38) {
      EXPECT_TRUE(std::isinf(e[i]) || e[i] > 3e38) << x[i];
    } else {
      EXPECT_NEAR(e[i] / ref, 1.0, 4e-7) << x[i];
    }
    double tref = std::tanh(static_cast<double>(x[i]));
    EXPECT_NEAR(t[i], tref, 2e-7 + 2e-7 * std::fabs(tref)) << x[i];
  }
}

TEST_F(SimdEquivalence, Norms) {
  for (int C : kLengths) {
    SCOPED_TRACE(C);
    auto x = random_vector(C, 3, 2.0f), w = random_vector(C, 4), b = random_vector(C, 5), d = random_vector(C, 6);
    std::vector<float> o1(C), o2(C);
    float m1, r1, m2, r2;
    avx2::layernorm_row(o1.data(), &m1, &r1, x.data(), w.data(), b.data(), C, 1e-5f);
    scalar::layernorm_row(o2.data(), &m2, &r2, x.data(), w.data(), b.data(), C, 1e-5f);
    EXPECT_LT(rel_error(o1, o2), 1e-5);
    EXPECT_NEAR(r1, r2, 1e-4 * std::fabs(r2));
    std::vector<float> dx1(C, 0.5f), dx2(C, 0.5f);
    avx2::layernorm_backward_row(dx1.data(), d.data(), x.data(), w.data(), m2, r2, C);
    scalar::layernorm_backward_row(dx2.data(), d.data(), x.data(), w.data(), m2, r2, C);
    EXPECT_LT(rel_error(dx1, dx2), 1e-5);
    std::vector<float> dw1(C, 1.0f), db1(C, 2.0f), dw2(C, 1.0f), db2(C, 2.0f);
    avx2::layernorm_param_grad_row(dw1.data(), db1.data(), d.data(), x.data(), m2, r2, C);
    scalar::layernorm_param_grad_row(dw2.data(), db2.data(), d.data(), x.data(), m2, r2, C);
    EXPECT_LT(rel_error(dw1, dw2), 1e-6);
    EXPECT_LT(rel_error(db1, db2), 1e-6);

    avx2::rmsnorm_row(o1.data(), &r1, x.data(), w.data(), C, 1e-6f);
    scalar::rmsnorm_row(o2.data(), &r2, x.data(), w.data(), C, 1e-6f);
    EXPECT_LT(rel_error(o1, o2), 1e-5);
    dx1.assign(C, 0.25f);
    dx2.assign(C, 0.25f);
    avx2::rmsnorm_backward_row(dx1.data(), d.data(), x.data(), w.data(), r2, C);
    scalar::rmsnorm_backward_row(dx2.data(), d.data(), x.data(), w.data(), r2, C);
    EXPECT_LT(rel_error(dx1, dx2), 1e-5);
    avx2::rmsnorm_param_grad_row(dw1.data(), d.data(), x.data(), r2, C);
    scalar::rmsnorm_param_grad_row(dw2.data(), d.data(), x.data(), r2, C);
    EXPECT_LT(rel_error(dw1, dw2), 1e-6);
  }
}

TEST_F(SimdEquivalence, Activations) {
  for (int n : kLengths) {
    SCOPED_TRACE(n);
    auto x = random_vector(n, 7, 3.0f), u = random_vector(n, 8), d = random_vector(n, 9);
    std::vector<float> o1(n), o2(n);
    avx2::gelu_forward(o1.data(), x.data(), n);
    scalar::gelu_forward(o2.data(), x.data(), n);
    EXPECT_LT(rel_error(o1, o2), 1e-6);
    avx2::gelu_backward(o1.data(), x.data(), d.data(), n);
    scalar::gelu_backward(o2.data(), x.data(), d.data(), n);
    EXPECT_LT(rel_error(o1, o2), 1e-6);
    avx2::swiglu_row(o1.data(), x.data(), u.data(), n);
    scalar::swiglu_row(o2.data(), x.data(), u.data(), n);
    EXPECT_LT(rel_error(o1, o2), 1e-6);
    std::vector<float> g1(n), g2(n);
    avx2::swiglu_backward_row(g1.data(), o1.data(), x.data(), u.data(), d.data(), n);
    scalar::swiglu_backward_row(g2.data(), o2.data(), x.data(), u.data(), d.data(), n);
    EXPECT_LT(rel_error(g1, g2), 1e-6);
    EXPECT_LT(rel_error(o1, o2), 1e-6);
  }
}

TEST_F(SimdEquivalence, Rope) {
  for (int half : {1, 3, 4, 8, 9, 16, 32, 33}) {
    SCOPED_TRACE(half);
    RopeTable table(2 * half, 300, 10000.0);
    auto x = random_vector(2 * half, 10);
    for (int pos : {0, 1, 257, 299}) {
      for (bool inverse : {false, true}) {
        auto a = x, b = x;
        avx2::rope_head(a.data(), &table.cos[pos * half], &table.sin[pos * half], half, inverse);
        scalar::rope_head(b.data(), &table.cos[pos * half], &table.sin[pos * half], half, inverse);
        EXPECT_LT(rel_error(a, b), 1e-6);
      }
    }
  }
}

TEST_F(SimdEquivalence, CrossEntropyPieces) {
  for (int n : kLengths) {
    SCOPED_TRACE(n);
    auto x = random_vector(n, 11, 5.0f);
    EXPECT_NEAR(avx2::logsumexp(x.data(), n), scalar::logsumexp(x.data(), n), 2e-5);
    float lse = scalar::logsumexp(x.data(), n);
    auto a = x, b = x;
    avx2::softmax_from_lse(a.data(), lse, 0.5f, n);
    scalar::softmax_from_lse(b.data(), lse, 0.5f, n);
    EXPECT_LT(rel_error(a, b), 1e-6);
  }
}

TEST_F(SimdEquivalence, AdamW) {
  for (int n : kLengths) {
    SCOPED_TRACE(n);
    auto p1 = random_vector(n, 12), g = random_vector(n, 13), m1 = random_vector(n, 14, 0.1f);
    auto v1 = random_vector(n, 15, 0.1f);
    for (auto& x : v1) x = x * x;
    auto p2 = p1, m2 = m1, v2 = v1;
    AdamWStep s;
    s.lr = 3e-3f;
    s.weight_decay = 0.1f;
    s.step = 7;
    avx2::adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, s);
    scalar::adamw_update(p2.data(), g.data(), m2.data(), v2.data(), n, s);
    EXPECT_LT(rel_error(p1, p2), 1e-6);
    EXPECT_LT(rel_error(m1, m2), 1e-6);
    EXPECT_LT(rel_error(v1, v2), 1e-6);
  }
}

TEST_F(SimdEquivalence, Matvec) {
  for (int K : {1, 7, 8, 9, 16, 24, 100, 257}) {
    for (int M = 1; M <= 4; ++M) {
      SCOPED_TRACE(::testing::Message() << "K=" << K << " M=" << M);
      int N = 19;
      auto x = random_vector(M * K, 16), w = random_vector(N * K, 17), b = random_vector(N, 18);
      std::vector<float> o1(M * N), o2(M * N);
      avx2::matvec_rows(o1.data() + 3, N, x.data(), K, w.data(), b.data(), M, K, 3, N);
      scalar::matvec_rows(o2.data() + 3, N, x.data(), K, w.data(), b.data(), M, K, 3, N);
      EXPECT_LT(rel_error(o1, o2), 1e-5);
    }
  }
}

}  // namespace
}  // namespace distllm::kernels
