// `distllm version`: build information, the CPU's SIMD features and the kernel
// paths this process takes.
#include <cstdio>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
#include "distllm/cli/command.h"

namespace distllm {
namespace {

int run_version(Args& args) {
  if (args.help_or_finish()) return 0;
  // The kernels have scalar and AVX2 paths; an AVX-512 machine runs the AVX2 ones.
  const Isa kernels = active_isa() >= Isa::kAvx2 ? Isa::kAvx2 : Isa::kScalar;
  std::printf("distllm 0.1.0\n");
  std::printf("cpu: %s\n", cpu_feature_list().c_str());
  std::printf("isa: best %s, active %s (DISTLLM_ISA=scalar|avx2|avx512 caps it)\n", isa_name(best_isa()),
              isa_name(active_isa()));
  std::printf("kernels: %s (training GEMM: OpenBLAS sgemm)\n", isa_name(kernels));
  std::printf("threads: %d\n", available_cpus());
  return 0;
}

DISTLLM_REGISTER_COMMAND("version", "print version, CPU features and the kernel paths taken", run_version);

}  // namespace
}  // namespace distllm
