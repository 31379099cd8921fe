#include "distllm/base/cpu.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace distllm {
namespace {

bool detect_avx2() {
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);  // clang 14 lacks "f16c" here
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

std::atomic<bool>& force_scalar_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("DISTLLM_FORCE_SCALAR");
    return env != nullptr && std::strcmp(env, "0") != 0 && env[0] != '\0';
  }()};
  return flag;
}

}  // namespace

bool cpu_has_avx2() {
  static const bool has = detect_avx2();
  return has;
}

bool use_avx2() { return cpu_has_avx2() && !force_scalar_flag().load(std::memory_order_relaxed); }

void set_force_scalar(bool force) { force_scalar_flag().store(force); }

}  // namespace distllm
