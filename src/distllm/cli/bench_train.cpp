// `distllm bench train`: training throughput, achieved FLOP/s and MFU against this
// machine's measured sgemm peak, with an optional per-kernel time breakdown.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/model/train_graph.h"
#include "distllm/train/lr_schedule.h"
#include "distllm/train/optimizer.h"

namespace distllm {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Peak: the best of several large square sgemms on the configured threads.
double measure_sgemm_gflops(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  CounterRng rng(1);
  for (auto& x : a) x = rng.uniform();
  for (auto& x : b) x = rng.uniform();
  double best = 0;
  for (int r = 0; r < reps + 1; ++r) {
    Timer t;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double gflops = 2.0 * n * n * n / t.seconds() / 1e9;
    if (r > 0) best = std::max(best, gflops);  // first call warms up threads and pages
  }
  return best;
}

// Parameters that take part in matrix multiplies: everything except pure lookup
// tables (gpt2's wpe; llama's embed_tokens when the head is untied). A tied
// embedding counts once, as the output head.
int64_t matmul_params(const ModelConfig& cfg) {
  ParamLayout layout(cfg);
  int64_t n = 0;
  for (const auto& t : layout.tensors()) {
    if (t.name == "transformer.wpe.weight") continue;
    if (t.name == "model.embed_tokens.weight" && !cfg.tie_embeddings) continue;
    n += t.numel;
  }
  return n;
}

int run_bench_train(Args& args) {
  apply_thread_flag(args);
  int B = static_cast<int>(args.get_int("batch", 8, "sequences per step"));
  int T = static_cast<int>(args.get_int("seq", 256, "tokens per sequence"));
  int steps = static_cast<int>(args.get_int("steps", 10, "timed steps"));
  int warmup = static_cast<int>(args.get_int("warmup-steps", 2, "untimed warm-up steps"));
  bool breakdown = args.get_flag("breakdown", "print time per kernel family");
  bool json = args.get_flag("json", "print one JSON object instead of text");
  int peak_n = static_cast<int>(args.get_int("peak-size", 2048, "matrix size for the sgemm peak measurement"));
  ModelConfig cfg = model_config_from_flags(args, "gpt2-124M", 0);
  if (args.help_or_finish()) return 0;
  DL_CHECK(steps > 0 && warmup >= 0, "--steps must be positive and --warmup-steps >= 0");

  double peak = measure_sgemm_gflops(peak_n, 3);
  Transformer model(cfg);
  model.init_weights(1);
  TrainGraph graph(cfg, B, T);
  AdamW opt(model.layout(), AdamWConfig{});
  std::vector<int32_t> tokens(static_cast<size_t>(B) * T), targets(tokens.size());
  CounterRng rng(7);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    targets[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
  }
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup && breakdown) {
      Profiler::reset();
      Profiler::set_enabled(true);
    }
    Timer t;
    model.zero_grad();
    graph.forward(model, tokens.data(), targets.data(), true);
    graph.backward(model);
    opt.step(model.params(), model.grads(), 1e-4);
    if (s >= warmup) ms.push_back(t.millis());
  }
  Profiler::set_enabled(false);

  double step_ms = median(ms);
  double tokens_per_step = static_cast<double>(B) * T;
  int64_t n_params = matmul_params(cfg);
  // PaLM's count: 6 N per token for the matmuls (forward + backward) plus
  // 12 * n_layer * T * attn_dim for attention scores and values.
  double flops_per_token = 6.0 * n_params + 12.0 * cfg.n_layer * T * cfg.attn_dim();
  double gflops = flops_per_token * tokens_per_step / (step_ms / 1e3) / 1e9;
  double tok_s = tokens_per_step / (step_ms / 1e3);
  if (json) {
    nlohmann::json j = {{"impl", "distllm"}, {"model", cfg.describe()}, {"batch", B}, {"seq", T},
                        {"threads", num_threads()}, {"ms_per_step", step_ms}, {"tokens_per_s", tok_s},
                        {"gflops", gflops}, {"peak_gflops", peak}, {"mfu", gflops / peak},
                        {"flops_per_token", flops_per_token}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model:       %s\n", cfg.describe().c_str());
  std::printf("shape:       batch %d x seq %d, %d threads, %d timed steps (median)\n", B, T, num_threads(), steps);
  std::printf("ms/step:     %.1f\n", step_ms);
  std::printf("tokens/s:    %.0f\n", tok_s);
  std::printf("GFLOP/s:     %.1f  (%.3g GFLOP/step: 6 x %.2fM matmul params + attention, per token)\n", gflops,
              flops_per_token * tokens_per_step / 1e9, n_params / 1e6);
  std::printf("sgemm peak:  %.1f GFLOP/s (%dx%d, %d threads)\n", peak, peak_n, peak_n, num_threads());
  std::printf("MFU:         %.1f%%\n", 100.0 * gflops / peak);
  if (breakdown) {
    std::printf("\n%-22s %10s %8s\n", "region", "ms/step", "share");
    double total = 0;
    for (const auto& e : Profiler::snapshot()) total += e.seconds;
    for (const auto& e : Profiler::snapshot())
      std::printf("%-22s %10.2f %7.1f%%\n", e.name.c_str(), e.seconds * 1e3 / steps, 100.0 * e.seconds / (step_ms * steps / 1e3));
    std::printf("%-22s %10.2f %7.1f%%\n", "(sum of regions)", total * 1e3 / steps, 100.0 * total / (step_ms * steps / 1e3));
  }
  return 0;
}

DISTLLM_REGISTER_COMMAND("bench train", "training throughput, GFLOP/s and MFU vs measured sgemm peak", run_bench_train);

}  // namespace
}  // namespace distllm
