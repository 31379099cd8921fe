// One GEMM test case and its random operands, shared by the sgemm and bf16 GEMM tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/rng.h"
#include "distllm/kernels/gemm.h"
#include "kernels/test_util.h"

namespace distllm::kernels::testing {

struct Case {
  Trans ta, tb;
  int64_t M, N, K;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra columns beyond the dense leading dimension
  float alpha = 1.0f, beta = 0.0f;
};

inline constexpr Trans kOps[] = {Trans::kN, Trans::kT};

inline std::string describe(const Case& c) {
  return std::string(c.ta == Trans::kT ? "T" : "N") + (c.tb == Trans::kT ? "T" : "N") + " M=" +
         std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " pads=" + std::to_string(c.pad_a) + "," + std::to_string(c.pad_b) + "," + std::to_string(c.pad_c) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) + " isa=" + isa_name(active_isa());
}

// Random normal A, B and C0 with the case's leading dimensions. C0's padding
// columns hold 7; `out` starts as C0, NaN where C is read only when beta != 0 (a
// GEMM called with beta == 0 must not read it), padding 7 (it must stay untouched).
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C0, out;
};

inline Operands make_operands(const Case& c, uint64_t seed) {
  const bool ta = c.ta == Trans::kT, tb = c.tb == Trans::kT;
  Operands o;
  o.lda = (ta ? c.M : c.K) + c.pad_a;
  o.ldb = (tb ? c.K : c.N) + c.pad_b;
  o.ldc = c.N + c.pad_c;
  o.A = distllm::testing::random_vector(static_cast<size_t>((ta ? c.K : c.M) * o.lda), seed);
  o.B = distllm::testing::random_vector(static_cast<size_t>((tb ? c.N : c.K) * o.ldb), seed + 1);
  o.C0 = distllm::testing::random_vector(static_cast<size_t>(c.M * o.ldc), seed + 2);
  o.out = o.C0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < o.ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * o.ldc + j);
      if (j >= c.N) o.C0[idx] = o.out[idx] = 7.0f;
      else if (c.beta == 0.0f) o.out[idx] = std::nanf("");
    }
  return o;
}

// `count` cases of every op combination with sides in [1, 70], some padded leading
// dimensions, and alpha in {1, -0.5, 2} and beta in {0, 1, 0.75} in turn.
inline std::vector<Case> random_odd_cases(int count, uint64_t seed) {
  CounterRng rng(seed);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng.uniform() * (hi - lo + 1)) % (hi - lo + 1); };
  const float alphas[] = {1.0f, -0.5f, 2.0f};
  const float betas[] = {0.0f, 1.0f, 0.75f};
  std::vector<Case> cases;
  for (int t = 0; t < count; ++t) {
    Case c{kOps[t % 2], kOps[(t / 2) % 2], pick(1, 70), pick(1, 70), pick(1, 70)};
    c.pad_a = t % 3 == 0 ? pick(1, 9) : 0;
    c.pad_b = t % 5 == 0 ? pick(1, 9) : 0;
    c.pad_c = t % 4 == 0 ? pick(1, 9) : 0;
    c.alpha = alphas[t % 3];
    c.beta = betas[(t / 3) % 3];
    cases.push_back(c);
  }
  return cases;
}

}  // namespace distllm::kernels::testing
