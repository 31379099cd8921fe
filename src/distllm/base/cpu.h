// Which SIMD paths this process may use, decided once from CPUID.
#pragma once

namespace distllm {

// True when the CPU has AVX2 and FMA (and F16C) and the OS saves YMM state.
bool cpu_has_avx2();

// True when kernels should take their AVX2 path: the CPU supports it and neither
// DISTLLM_FORCE_SCALAR=1 nor set_force_scalar(true) asked for the scalar reference.
bool use_avx2();

// Tests flip this to compare the vectorised kernels with their scalar references.
void set_force_scalar(bool force);

}  // namespace distllm
