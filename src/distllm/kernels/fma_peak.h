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

// The bf16 peak: the same loop on vdpbf16ps (each 512-bit instruction is 32
// multiply-adds of bf16 pairs summed into 16 f32 lanes, 64 FLOPs), the ceiling of
// gemm_bf16 and of training with --compute-dtype bf16. Requires gemm_bf16_available().
double measure_bf16_dot_peak_gflops();

namespace detail {
// One thread's loop: `iters` rounds of 12 independent FMA chains. Returns a value
// that depends on every chain (so none is optimised away).
float fma_loop_avx2(long iters);
float fma_loop_avx512(long iters);
float bf16_dot_loop_avx512(long iters);  // kFmaChains chains of vdpbf16ps
constexpr int kFmaChains = 12;  // covers 2 FMA ports x 4-5 cycles of latency
}  // namespace detail

}  // namespace distllm::kernels
