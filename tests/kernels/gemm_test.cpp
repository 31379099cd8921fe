// kernels::sgemm against OpenBLAS's cblas_sgemm (the reference) on every op
// combination and every ISA path this machine has (set_isa_cap: scalar, avx2, avx512).
//
// Tolerance: both sides sum K products in different orders, so each element may
// differ by a few fp32 roundings of the sum of |products|. Elementwise we require
//   |ours - ref| <= 1e-6 * sqrt(K) * (|alpha| * sum_k |a_ik b_kj| + |beta c_ij|) + 1e-30.
// Measured on the Sapphire Rapids VM (all ISA paths): the largest |ours - ref| is
// 0.12 of this bound (1.2e-7 * sqrt(K) * sum|a b|), in the random odd shapes; 0.05
// of it in the fixed shapes up to 300 x 500 x 700.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/rng.h"
#include "distllm/base/parallel.h"
#include "distllm/kernels/gemm.h"
#include "kernels/gemm_case.h"

namespace distllm::kernels {
namespace {

using testing::Case;
using testing::describe;

// Returns the largest error relative to the bound (must be <= 1).
double check_case(const Case& c, uint64_t seed) {
  const bool ta = c.ta == Trans::kT, tb = c.tb == Trans::kT;
  testing::Operands op = testing::make_operands(c, seed);
  const int64_t lda = op.lda, ldb = op.ldb, ldc = op.ldc;
  const std::vector<float>&A = op.A, &B = op.B, &C0 = op.C0;
  std::vector<float>& ours = op.out;
  std::vector<float> ref = C0;
  sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, ours.data(), ldc);
  auto cta = ta ? CblasTrans : CblasNoTrans, ctb = tb ? CblasTrans : CblasNoTrans;
  cblas_sgemm(CblasRowMajor, cta, ctb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, ref.data(),
              ldc);
  // Σ_k |a_ik b_kj| for the bound.
  std::vector<float> absA(A.size()), absB(B.size()), mag(static_cast<size_t>(c.M * ldc), 0.0f);
  for (size_t i = 0; i < A.size(); ++i) absA[i] = std::fabs(A[i]);
  for (size_t i = 0; i < B.size(); ++i) absB[i] = std::fabs(B[i]);
  cblas_sgemm(CblasRowMajor, cta, ctb, c.M, c.N, c.K, 1.0f, absA.data(), lda, absB.data(), ldb, 0.0f, mag.data(),
              ldc);
  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      size_t idx = static_cast<size_t>(i * ldc + j);
      if (j >= c.N) {
        EXPECT_EQ(ours[idx], 7.0f) << "padding written at " << i << "," << j << " " << describe(c);
        continue;
      }
      double bound = 1e-6 * std::sqrt(static_cast<double>(c.K)) *
                         (std::fabs(c.alpha) * mag[idx] + std::fabs(c.beta * C0[idx])) +
                     1e-30;
      double err = std::fabs(static_cast<double>(ours[idx]) - ref[idx]);
      if (!(err <= bound)) {
        ADD_FAILURE() << describe(c) << " at " << i << "," << j << ": ours " << ours[idx] << " ref " << ref[idx];
        return 1e9;
      }
      worst = std::max(worst, err / bound);
    }
  }
  return worst;
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::kScalar};
  if (best_isa() >= Isa::kAvx2) v.push_back(Isa::kAvx2);
  if (best_isa() >= Isa::kAvx512) v.push_back(Isa::kAvx512);
  return v;
}

struct IsaCapReset {
  ~IsaCapReset() { set_isa_cap(Isa::kAvx512); }
};

using testing::kOps;

TEST(Gemm, TinyAndFixedShapesEveryOpEveryIsa) {
  IsaCapReset reset;
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 1, 7},    {1, 37, 5},  {13, 1, 9},  {2, 3, 1},
                               {14, 32, 1}, {15, 33, 17}, {6, 16, 300}, {28, 64, 257}, {300, 500, 700}};
  double worst = 0;
  for (Isa isa : isas()) {
    set_isa_cap(isa);
    for (Trans ta : kOps)
      for (Trans tb : kOps)
        for (auto& s : shapes) worst = std::max(worst, check_case({ta, tb, s[0], s[1], s[2]}, 11));
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

TEST(Gemm, RandomOddShapesLeadingDimsAlphaBeta) {
  IsaCapReset reset;
  double worst = 0;
  for (Isa isa : isas()) {
    set_isa_cap(isa);
    int t = 0;
    for (const Case& c : testing::random_odd_cases(60, 2024)) worst = std::max(worst, check_case(c, 100 + t++));
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

TEST(Gemm, BlockBoundariesAccumulate) {
  // Shapes that cross KC/MC/NC and the thread split, accumulating into C.
  IsaCapReset reset;
  for (Isa isa : isas()) {
    set_isa_cap(isa);
    for (Trans ta : kOps)
      for (Trans tb : kOps) {
        check_case({ta, tb, 129, 257, 513, 3, 0, 5, 1.0f, 1.0f}, 7);
        check_case({ta, tb, 350, 70, 260, 0, 2, 0, -1.0f, 0.5f}, 8);
      }
  }
}

TEST(Gemm, MatchesOpenBlasOnTrainingLikeShapeTN) {
  IsaCapReset reset;
  set_isa_cap(best_isa());
  check_case({Trans::kT, Trans::kN, 192, 256, 1024, 0, 0, 0, 1.0f, 1.0f}, 9);
  check_case({Trans::kN, Trans::kT, 256, 192, 768, 0, 0, 0, 1.0f, 0.0f}, 10);
}

TEST(Gemm, HugeOutputTakesSeveralKSlices) {
  // M x N >= 16 Mi elements and K > KC: two passes over C.
  IsaCapReset reset;
  set_isa_cap(best_isa());
  check_case({Trans::kN, Trans::kT, 4097, 4097, 600, 0, 0, 0, 1.0f, 1.0f}, 12);
}

TEST(Gemm, TallTileRepacksAInRowBlocks) {
  // One thread's tile taller than the rows of packed A the driver keeps per KC slice
  // (8 MB: 4032 rows at KC = 512 on AVX-512, 8192 at KC = 256 on AVX2), crossing NC
  // blocks and KC slices too. The scalar path's blocking is AVX2's.
  IsaCapReset reset;
  const int threads = num_threads();
  set_num_threads(1);
  for (Isa isa : isas()) {
    if (isa == Isa::kScalar) continue;
    set_isa_cap(isa);
    for (Trans ta : kOps) check_case({ta, Trans::kN, 8300, 600, 600, 0, 0, 3, 1.0f, 0.5f}, 13);
  }
  set_num_threads(threads);
}

// 1 to 4 threads (oversubscribed where there are fewer cores): grids 1 x t, 2 x 2
// and t x 1, whose rows share their packed A, split into parts that may be empty
// (fewer panels than threads), over several KC slices and chunks of packed rows.
// Every element is one thread's sum in one k order whatever the grid, so each
// thread count must give the 1-thread result bit for bit (checked against OpenBLAS
// once). ctest runs it again as GemmSmallerTeam with OMP_THREAD_LIMIT=2: a team of 3
// or 4 is then refused and the members run several tiles each, sharing nothing
// (OpenBLAS is not called then: it spins forever on a refused team).
TEST(Gemm, ThreadGridsMatchOneThreadBitwise) {
  IsaCapReset reset;
  set_isa_cap(best_isa());
  const int threads = num_threads();
  const bool limited = std::getenv("OMP_THREAD_LIMIT") != nullptr;
  if (limited) {
    int granted = 0;
    parallel_team(4, [&](int, int size) { granted = size; });
    EXPECT_LT(granted, 4) << "OMP_THREAD_LIMIT should shrink the team";
  }
  const int64_t shapes[][3] = {{5, 200, 70}, {30, 1000, 40}, {700, 130, 1100}, {4100, 100, 530}};
  uint64_t seed = 14;
  for (auto& s : shapes)
    for (Trans ta : kOps)
      for (Trans tb : kOps) {
        const Case c{ta, tb, s[0], s[1], s[2], 0, 0, 1, 1.0f, 0.5f};
        set_num_threads(1);
        if (!limited) check_case(c, seed);
        testing::Operands op = testing::make_operands(c, seed++);
        const std::vector<float> start = op.out;
        sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, op.A.data(), op.lda, op.B.data(), op.ldb, c.beta, op.out.data(),
              op.ldc);
        const std::vector<float> one_thread = op.out;
        for (int t : {2, 3, 4}) {
          set_num_threads(t);
          op.out = start;
          sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, op.A.data(), op.lda, op.B.data(), op.ldb, c.beta,
                op.out.data(), op.ldc);
          EXPECT_TRUE(op.out == one_thread) << describe(c) << " with " << t << " threads";
        }
      }
  set_num_threads(threads);
}

}  // namespace
}  // namespace distllm::kernels
