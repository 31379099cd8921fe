// kernels::gemm_bf16 (bf16 inputs, f32 accumulation) against a double-precision
// reference computed on the same inputs rounded to bf16 (nearest even, tensor/
// dtype.h's f32_to_bf16), on every op combination, odd sizes (odd K pads a pair),
// leading dimensions, alpha/beta, and shapes that cross the blocking.
//
// Tolerance: bf16 x bf16 products are exact in f32, so against the rounded-input
// reference only the f32 summation differs, as in sgemm's test:
//   |ours - ref| <= 1e-6 * sqrt(K) * (|alpha| * sum_k |a_ik b_kj| + |beta c_ij|) + 1e-30.
// Measured on the Sapphire Rapids VM: the worst element is 0.07 of this bound. A
// different rounding (truncation) would miss it by orders of magnitude.
//
// Against f32 (the unrounded inputs), the error is the inputs' rounding: each
// product is off by up to 2^-8 relative (both inputs 2^-9), so we require
//   |ours - exact| <= 2^-7 * (|alpha| * sum_k |a_ik b_kj|) + the bound above;
// measured worst 0.72 of it (a one-term sum, K = 1), and a relative Frobenius error
// ||ours - exact|| / ||exact|| of 2.3e-3 over the fixed shapes (random normal inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/rng.h"
#include "distllm/kernels/fma_peak.h"
#include "distllm/kernels/gemm.h"
#include "distllm/tensor/dtype.h"
#include "kernels/gemm_case.h"

namespace distllm::kernels {
namespace {

using testing::Case;
using testing::describe;

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Worst {
  double rounded = 0;  // worst error / bound against the bf16-rounded reference
  double exact = 0;    // against the f32 inputs
  double frob_num = 0, frob_den = 0;
};

void check_case(const Case& c, uint64_t seed, Worst& w) {
  const bool ta = c.ta == Trans::kT, tb = c.tb == Trans::kT;
  testing::Operands op = testing::make_operands(c, seed);
  const int64_t lda = op.lda, ldb = op.ldb, ldc = op.ldc;
  const std::vector<float>&A = op.A, &B = op.B, &C0 = op.C0;
  std::vector<float>& ours = op.out;
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, ours.data(), ldc);
  auto a_at = [&](int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
  auto b_at = [&](int64_t k, int64_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; };
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * ldc + j);
      if (j >= c.N) {
        ASSERT_EQ(ours[idx], 7.0f) << "padding written at " << i << "," << j << " " << describe(c);
        continue;
      }
      double rounded = 0, exact = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = a_at(i, k), b = b_at(k, j);
        rounded += static_cast<double>(round_bf16(a_at(i, k))) * round_bf16(b_at(k, j));
        exact += a * b;
        mag += std::fabs(a * b);
      }
      const double cterm = c.beta == 0.0f ? 0.0 : c.beta * static_cast<double>(C0[idx]);
      rounded = c.alpha * rounded + cterm;
      exact = c.alpha * exact + cterm;
      const double sum_bound =
          1e-6 * std::sqrt(static_cast<double>(c.K)) * (std::fabs(c.alpha) * mag * 1.01 + std::fabs(cterm)) + 1e-30;
      const double round_bound = std::ldexp(1.0, -7) * std::fabs(c.alpha) * mag + sum_bound;
      const double e1 = std::fabs(ours[idx] - rounded), e2 = std::fabs(ours[idx] - exact);
      ASSERT_LE(e1, sum_bound) << describe(c) << " at " << i << "," << j << ": ours " << ours[idx] << " ref "
                               << rounded;
      ASSERT_LE(e2, round_bound) << describe(c) << " at " << i << "," << j << " against f32 inputs";
      w.rounded = std::max(w.rounded, e1 / sum_bound);
      w.exact = std::max(w.exact, e2 / round_bound);
      w.frob_num += e2 * e2;
      w.frob_den += exact * exact;
    }
  }
}

class GemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gemm_bf16_available()) GTEST_SKIP() << "bf16 GEMM needs AVX512_BF16: " << gemm_bf16_unavailable_reason();
  }
};

using testing::kOps;

TEST_F(GemmBf16, FixedShapesEveryOp) {
  const int64_t shapes[][3] = {{1, 1, 1},    {1, 1, 2},     {1, 37, 5},   {13, 1, 9},    {2, 3, 1},
                               {12, 32, 3},  {15, 33, 17},  {6, 16, 301}, {28, 64, 257}, {13, 47, 33},
                               {100, 90, 1024}};
  Worst w;
  for (Trans ta : kOps)
    for (Trans tb : kOps)
      for (auto& s : shapes) check_case({ta, tb, s[0], s[1], s[2]}, 21, w);
  RecordProperty("worst_error_over_sum_bound", std::to_string(w.rounded));
  RecordProperty("worst_error_over_rounding_bound", std::to_string(w.exact));
  RecordProperty("relative_frobenius_error_vs_f32", std::to_string(std::sqrt(w.frob_num / w.frob_den)));
}

TEST_F(GemmBf16, RandomOddShapesLeadingDimsAlphaBeta) {
  Worst w;
  int t = 0;
  for (const Case& c : testing::random_odd_cases(80, 77)) check_case(c, 300 + t++, w);
  RecordProperty("worst_error_over_sum_bound", std::to_string(w.rounded));
}

TEST_F(GemmBf16, BlockBoundariesAndThreadSplit) {
  // K crosses the bf16 KC (512) with an odd remainder; M and N cross MC / NC.
  Worst w;
  for (Trans ta : kOps)
    for (Trans tb : kOps) {
      check_case({ta, tb, 350, 130, 1031, 3, 0, 5, 1.0f, 1.0f}, 7, w);
      check_case({ta, tb, 129, 2100, 65, 0, 2, 0, -1.0f, 0.5f}, 8, w);
    }
  RecordProperty("worst_error_over_sum_bound", std::to_string(w.rounded));
}

TEST_F(GemmBf16, HugeOutputTakesDeeperKSlices) {
  // M x N >= 16 Mi and K > KC: the driver doubles KC (1024 k, 512 pair words). The
  // double reference is too slow at this size, so compare with the same product
  // taken 1024 rows at a time (below the threshold: KC 512). Only the f32 grouping
  // of the sums differs, so they agree to f32 rounding of the sum (measured max
  // |difference| / max |C| about 1e-6; bound 1e-5).
  const int64_t M = 4097, N = 4097, K = 1100;
  Case c{Trans::kN, Trans::kT, M, N, K, 0, 0, 0, 1.0f, 1.0f};
  testing::Operands op = testing::make_operands(c, 5);
  std::vector<float> whole = op.C0, sliced = op.C0;
  gemm_bf16(Trans::kN, Trans::kT, M, N, K, 1.0f, op.A.data(), op.lda, op.B.data(), op.ldb, 1.0f, whole.data(), op.ldc);
  for (int64_t m0 = 0; m0 < M; m0 += 1024) {
    const int64_t rows = std::min<int64_t>(1024, M - m0);
    gemm_bf16(Trans::kN, Trans::kT, rows, N, K, 1.0f, op.A.data() + m0 * op.lda, op.lda, op.B.data(), op.ldb, 1.0f,
              sliced.data() + m0 * op.ldc, op.ldc);
  }
  double worst = 0, largest = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(whole[i]) - sliced[i]));
    largest = std::max(largest, std::fabs(static_cast<double>(sliced[i])));
  }
  EXPECT_LE(worst, 1e-5 * largest);
  RecordProperty("max_difference_over_max_c", std::to_string(worst / largest));
}

TEST_F(GemmBf16, NaNAndInfPropagate) {
  // Rounding keeps NaN a NaN and inf an inf (a bit trick that rounds by adding
  // 0x7fff would turn the largest finite values into inf, but never NaN into a number).
  std::vector<float> A(4 * 4, 1.0f), B(4 * 32, 1.0f), C(4 * 32, 0.0f);
  A[0] = std::nanf("");
  A[5] = INFINITY;
  gemm_bf16(Trans::kN, Trans::kN, 4, 32, 4, 1.0f, A.data(), 4, B.data(), 32, 0.0f, C.data(), 32);
  EXPECT_TRUE(std::isnan(C[0]));
  EXPECT_TRUE(std::isinf(C[32]));
  EXPECT_EQ(C[64], 4.0f);
}

TEST_F(GemmBf16, DotProductPeakIsMeasured) {
  const double peak = measure_bf16_dot_peak_gflops();  // the ceiling bench gemm / train quote
  EXPECT_GT(peak, 1.0);
  RecordProperty("bf16_dot_peak_gflops", std::to_string(peak));
}

TEST(GemmBf16Dispatch, ErrorNamesTheReasonWhenUnavailable) {
  set_isa_cap(Isa::kAvx2);
  std::vector<float> A(4, 1.0f), C(4, 0.0f);
  try {
    gemm_bf16(Trans::kN, Trans::kN, 2, 2, 2, 1.0f, A.data(), 2, A.data(), 2, 0.0f, C.data(), 2);
    ADD_FAILURE() << "gemm_bf16 ran below avx512";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 compute is not available"), std::string::npos) << e.what();
  }
  set_isa_cap(Isa::kAvx512);
}

}  // namespace
}  // namespace distllm::kernels
