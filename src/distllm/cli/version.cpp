// `distllm version`: build information, the CPU's SIMD features and the kernel
// paths this process takes.
#include <cstdio>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
#include "distllm/cli/command.h"
#include "distllm/kernels/gemm.h"
#include "distllm/kernels/matmul.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/model/family.h"

namespace distllm {
namespace {

int run_version(Args& args) {
  if (args.help_or_finish()) return 0;
  // Most kernels have scalar and AVX2 paths (an AVX-512 machine runs the AVX2 ones);
  // the decode linears and distllm's own GEMM also have AVX-512 ones.
  const Isa active = active_isa();
  const Isa kernels = active >= Isa::kAvx2 ? Isa::kAvx2 : Isa::kScalar;
  std::printf("distllm 0.1.0\n");
  std::printf("cpu: %s\n", cpu_feature_list().c_str());
  std::printf("isa: best %s, active %s (DISTLLM_ISA=scalar|avx2|avx512 caps it)\n", isa_name(best_isa()),
              isa_name(active));
  std::printf("training f32 GEMM: %s (DISTLLM_SGEMM=distllm|openblas chooses)\n", kernels::f32_gemm_path());
  std::printf("elementwise kernels (norms, activations, attention, softmax, AdamW): %s%s\n", isa_name(kernels),
              active > kernels ? " (they have no AVX-512 version)" : "");
  std::printf("training --compute-dtype bf16: %s\n",
              kernels::gemm_bf16_available() ? "available (vdpbf16ps GEMM)" : kernels::gemm_bf16_unavailable_reason());
  std::printf("decode linears: f32 %s, bf16 %s, int8 %s\n", isa_name(active), kernels::linear_bi_bf16_path(),
              kernels::linear_bi_q8_path());
  std::printf("model families (config.json model_type): %s\n", supported_model_types().c_str());
  std::printf("threads: %d\n", available_cpus());
  return 0;
}

DISTLLM_REGISTER_COMMAND("version", "print version, CPU features and the kernel paths taken", run_version);

}  // namespace
}  // namespace distllm
