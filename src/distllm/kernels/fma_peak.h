// The machine's floating-point peak as this process reaches it: a loop of
// independent fused multiply-adds on every thread, with the widest vectors of an
// ISA level. MFU in `distllm bench train` is measured against the best level's peak
// (a property of the hardware), besides OpenBLAS's sgemm (a property of a library).
#pragma once

#include "distllm/base/cpu.h"

namespace distllm::kernels {

// GFLOP/s summed over num_threads() threads, each running the loop at once. An ISA
// level above best_isa() is measured at best_isa().
double measure_fma_peak_gflops(Isa isa);

namespace detail {
// One thread's loop: `iters` rounds of 12 independent FMA chains. Returns a value
// that depends on every chain (so none is optimised away).
float fma_loop_avx2(long iters);
float fma_loop_avx512(long iters);
constexpr int kFmaChains = 12;  // covers 2 FMA ports x 4-5 cycles of latency
}  // namespace detail

}  // namespace distllm::kernels
