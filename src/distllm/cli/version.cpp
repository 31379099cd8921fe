// `distllm version`: build information.
#include <cstdio>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
#include "distllm/cli/command.h"

namespace distllm {
namespace {

int run_version(Args& args) {
  if (args.help_or_finish()) return 0;
  std::printf("distllm 0.1.0\ncpu: %s\nthreads: %d\n", cpu_has_avx2() ? "avx2+fma" : "scalar only",
              available_cpus());
  return 0;
}

DISTLLM_REGISTER_COMMAND("version", "print version and CPU features", run_version);

}  // namespace
}  // namespace distllm
