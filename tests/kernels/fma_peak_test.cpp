// The FMA peak micro-benchmark runs at every level (levels above the machine's
// fall back to its best) and gives a finite, positive rate. How fast is not a test
// (this machine is shared): `distllm bench train` prints it.
#include <gtest/gtest.h>

#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/kernels/fma_peak.h"

namespace distllm::kernels {
namespace {

TEST(FmaPeak, MeasuresEveryLevel) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    const double gflops = measure_fma_peak_gflops(isa);
    EXPECT_TRUE(std::isfinite(gflops) && gflops > 0.0) << isa_name(isa) << ": " << gflops;
  }
}

}  // namespace
}  // namespace distllm::kernels
