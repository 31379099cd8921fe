// `distllm bench gemm`: kernels::sgemm (distllm's own GEMM) and OpenBLAS's
// cblas_sgemm side by side in one run, on a square 2048^3 product and on the
// products of one gpt2-124M training step (forward, backward-input and
// backward-weight of every linear layer and the tied output head). Prints the
// median GFLOP/s of each, their ratio, and the share of the machine's measured FMA
// peak (the best ISA's vectors on every thread).
//
// --dtype bf16 runs kernels::gemm_bf16 (bf16 inputs, f32 sums) against our own f32
// sgemm instead, its share taken of the measured vdpbf16ps peak (the f32 side's of
// the FMA peak).
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/kernels/fma_peak.h"
#include "distllm/kernels/gemm.h"

namespace distllm {
namespace {

using kernels::Trans;

struct Shape {
  std::string name;
  Trans ta, tb;
  int64_t M, N, K;
  float beta;
  int count = 1;  // times per training step (12 layers)
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run_bench_gemm(Args& args) {
  int64_t repeat = args.get_int("repeat", 5, "timed runs per product (the median is shown)");
  int64_t size = args.get_int("size", 2048, "side of the square NN product");
  int64_t tokens = args.get_int("tokens", 1024, "tokens per step for the training shapes (batch x seq)");
  bool square_only = args.get_flag("square-only", "only the square product");
  std::string only = args.get_string("only", "", "run only products whose name contains this text");
  std::string dtype = args.get_string("dtype", "f32", "f32: ours vs OpenBLAS | bf16: gemm_bf16 vs our f32 sgemm");
  apply_thread_flag(args);
  if (args.help_or_finish()) return 0;
  DL_CHECK(dtype == "f32" || dtype == "bf16", "--dtype must be f32 or bf16, got '%s'", dtype.c_str());
  const bool bf16 = dtype == "bf16";
  DL_CHECK(repeat >= 1 && repeat <= 100, "--repeat must be in [1, 100]");
  DL_CHECK(size >= 1 && tokens >= 1, "--size and --tokens must be positive");

  std::vector<Shape> shapes{{"square " + std::to_string(size) + "^3", Trans::kN, Trans::kN, size, size, size, 0.0f}};
  if (!square_only) {
    // gpt2-124M, C = 768: (name, in, out) of each [in, out] Conv1D weight.
    const struct { const char* name; int64_t in, out; } layers[] = {
        {"qkv", 768, 2304}, {"attn.proj", 768, 768}, {"mlp.fc", 768, 3072}, {"mlp.proj", 3072, 768}};
    for (const auto& l : layers) {
      shapes.push_back({std::string(l.name) + " fwd", Trans::kN, Trans::kN, tokens, l.out, l.in, 0.0f, 12});
      shapes.push_back({std::string(l.name) + " bwd-in", Trans::kN, Trans::kT, tokens, l.in, l.out, 0.0f, 12});
      shapes.push_back({std::string(l.name) + " bwd-w", Trans::kT, Trans::kN, l.in, l.out, tokens, 1.0f, 12});
    }
    // Tied output head, W = wte [V, C] (out, in).
    const int64_t V = 50257, C = 768;
    shapes.push_back({"lm_head fwd", Trans::kN, Trans::kT, tokens, V, C, 0.0f});
    shapes.push_back({"lm_head bwd-in", Trans::kN, Trans::kN, tokens, C, V, 0.0f});
    shapes.push_back({"lm_head bwd-w", Trans::kT, Trans::kN, V, C, tokens, 1.0f});
  }

  const kernels::GemmBlocking blk = bf16 ? kernels::gemm_bf16_blocking() : kernels::gemm_blocking();
  std::printf("threads: %d, isa: %s (best %s), micro-kernel %dx%d, KC=%d MC=%d NC=%d\n", num_threads(),
              isa_name(active_isa()), isa_name(best_isa()), blk.mr, blk.nr, blk.kc, blk.mc, blk.nc);
  std::fflush(stdout);
  // The peaks are measured before and after the products and the higher value kept:
  // a neighbour on a shared machine can slow the probe for seconds (once to half the
  // usual value), and a low peak would inflate every share printed below.
  auto measure_peaks = [bf16] {
    const double fma = kernels::measure_fma_peak_gflops(best_isa());
    // "ours" is the tested side, "peer" the one it is compared with.
    return std::pair{fma, bf16 ? kernels::measure_bf16_dot_peak_gflops() : fma};
  };
  const auto [fma_before, ours_before] = measure_peaks();

  struct Row {
    const Shape* shape;
    double ours_gflops, peer_gflops;
  };
  std::vector<Row> rows;
  double train_flops = 0, train_ours_s = 0, train_blas_s = 0;
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    if (!only.empty() && s.name.find(only) == std::string::npos) continue;
    const bool ta = s.ta == Trans::kT, tb = s.tb == Trans::kT;
    const int64_t lda = ta ? s.M : s.K, ldb = tb ? s.K : s.N;
    CounterRng rng(si + 1);
    std::vector<float> A(static_cast<size_t>(s.M * s.K)), B(static_cast<size_t>(s.K * s.N)),
        Cm(static_cast<size_t>(s.M * s.N), 0.0f);
    for (auto& x : A) x = rng.uniform() - 0.5f;
    for (auto& x : B) x = rng.uniform() - 0.5f;
    auto ours = [&] {
      (bf16 ? kernels::gemm_bf16 : kernels::sgemm)(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb,
                                                  s.beta, Cm.data(), s.N);
    };
    auto blas = [&] {
      if (bf16) {
        kernels::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, s.beta, Cm.data(), s.N);
        return;
      }
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f,
                  A.data(), lda, B.data(), ldb, s.beta, Cm.data(), s.N);
    };
    std::vector<double> t_ours, t_blas;
    ours();  // warm-up: pages, thread pools, packing buffers
    blas();
    for (int64_t r = 0; r < repeat; ++r) {  // interleaved so drifting load hits both alike
      Timer t1;
      ours();
      t_ours.push_back(t1.seconds());
      Timer t2;
      blas();
      t_blas.push_back(t2.seconds());
    }
    const double flops = 2.0 * s.M * s.N * s.K;
    const double so = median_of(t_ours), sb = median_of(t_blas);
    const double go = flops / so / 1e9, gb = flops / sb / 1e9;
    if (si > 0) train_flops += s.count * flops, train_ours_s += s.count * so, train_blas_s += s.count * sb;
    rows.push_back({&s, go, gb});
  }

  const auto [fma_after, ours_after] = measure_peaks();
  const double fma_peak = std::max(fma_before, fma_after), ours_peak = std::max(ours_before, ours_after);
  std::printf("FMA peak (%s, %d threads): %.1f GFLOP/s (before the products %.1f, after %.1f); each product: median of "
              "%lld runs\n",
              isa_name(best_isa()), num_threads(), fma_peak, fma_before, fma_after, static_cast<long long>(repeat));
  if (bf16) std::printf("bf16 dot-product peak (vdpbf16ps, %d threads): %.1f GFLOP/s\n", num_threads(), ours_peak);
  std::printf("\n%-16s %2s %6s %6s %6s %12s %12s %7s %8s %8s\n", "product", "op", "M", "N", "K",
              bf16 ? "bf16 GF/s" : "ours GF/s", bf16 ? "f32 (ours)" : "OpenBLAS", "ratio", "ours%pk",
              bf16 ? "f32%pk" : "blas%pk");
  for (const Row& r : rows) {
    const Shape& s = *r.shape;
    std::printf("%-16s %s%s %6lld %6lld %6lld %12.1f %12.1f %7.2f %7.1f%% %7.1f%%\n", s.name.c_str(),
                s.ta == Trans::kT ? "T" : "N", s.tb == Trans::kT ? "T" : "N", static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K), r.ours_gflops, r.peer_gflops,
                r.ours_gflops / r.peer_gflops, 100.0 * r.ours_gflops / ours_peak, 100.0 * r.peer_gflops / fma_peak);
  }
  if (train_flops > 0) {
    const double go = train_flops / train_ours_s / 1e9, gb = train_flops / train_blas_s / 1e9;
    std::printf("%-16s %2s %6s %6s %6s %12.1f %12.1f %7.2f %7.1f%% %7.1f%%\n", "training step", "", "", "", "", go, gb,
                go / gb, 100.0 * go / ours_peak, 100.0 * gb / fma_peak);
    std::printf("(training step: every product of a gpt2-124M step, 12 layers + head: total FLOPs / total median time)\n");
  }
  return 0;
}

}  // namespace

DISTLLM_REGISTER_COMMAND("bench gemm",
                         "distllm's sgemm vs OpenBLAS (or --dtype bf16: bf16 vs f32): GFLOP/s, ratio, % of peak",
                         run_bench_gemm);

}  // namespace distllm
