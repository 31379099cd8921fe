// The batch-invariant inference linear (kernels/linear_bi.h) next to OpenBLAS sgemm
// (through matmul_forward, which sends these sizes to sgemm for M > a few rows) on
// gpt2-124M's shapes. Counters: GFLOP/s (2·M·N·K per call).
//   build/release/bin/micro_linear_bi --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/matmul.h"

namespace {

using namespace distllm;

struct Problem {
  int M, N, K;
  std::vector<float> x, w, bias, out;
  Problem(int m, int n, int k) : M(m), N(n), K(k), x(size_t(m) * k), w(size_t(n) * k), bias(n), out(size_t(m) * n) {
    CounterRng rng(7, 0, 0);
    for (float& v : x) v = static_cast<float>(rng.uniform_double() - 0.5);
    for (float& v : w) v = static_cast<float>(rng.uniform_double() - 0.5) * 0.05f;
  }
};

void set_flops(benchmark::State& state, const Problem& p) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * p.M * p.N * p.K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: M, N, K
void BM_LinearBi(benchmark::State& state) {
  Problem p(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  kernels::PackedLinear packed(p.w.data(), p.N, p.K);
  for (auto _ : state) {
    kernels::linear_bi(p.out.data(), p.N, p.x.data(), p.K, packed, p.bias.data(), p.M);
    benchmark::ClobberMemory();
  }
  set_flops(state, p);
}

// int8 weights (q8_0 x q8_0): Args M, N, K, AMX (1: where the CPU has it, 0: off).
void BM_LinearBiInt8(benchmark::State& state) {
  Problem p(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  kernels::PackedLinear packed(p.w.data(), p.N, p.K, DType::kI8);
  set_amx_enabled(state.range(3) != 0);
  for (auto _ : state) {
    kernels::linear_bi(p.out.data(), p.N, p.x.data(), p.K, packed, p.bias.data(), p.M);
    benchmark::ClobberMemory();
  }
  set_amx_enabled(true);
  set_flops(state, p);
}

void BM_Sgemm(benchmark::State& state) {
  Problem p(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  for (auto _ : state) {
    kernels::matmul_forward(p.out.data(), p.x.data(), p.w.data(), p.bias.data(), p.M, p.K, p.N,
                            kernels::WeightLayout::kOutIn);
    benchmark::ClobberMemory();
  }
  set_flops(state, p);
}

// gpt2-124M: qkv 768->2304, mlp_in 768->3072, mlp_out 3072->768, lm_head 768->50257.
void shapes(benchmark::internal::Benchmark* b) {
  for (int m : {1, 4, 8, 16, 64})
    for (auto [n, k] : {std::pair{2304, 768}, {3072, 768}, {768, 3072}, {50257, 768}}) b->Args({m, n, k});
  b->UseRealTime();
}

BENCHMARK(BM_LinearBi)->Apply(shapes);
BENCHMARK(BM_Sgemm)->Apply(shapes);
// Llama 134M's mlp_in (768 -> 4096) and mlp_out (2048 -> 768) at decode batches and prefill.
BENCHMARK(BM_LinearBiInt8)->ArgsProduct({{1, 8, 16, 512}, {4096}, {768}, {0, 1}})->UseRealTime();
BENCHMARK(BM_LinearBiInt8)->ArgsProduct({{8, 512}, {768}, {2048}, {0, 1}})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
