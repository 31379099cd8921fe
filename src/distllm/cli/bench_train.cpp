// `distllm bench train`: training throughput, achieved FLOP/s and MFU against this
// machine's measured FMA peak (the best ISA's vectors on every thread) and against
// OpenBLAS's sgemm peak, with an optional per-kernel time breakdown. Under
// mpirun it runs any data-parallel strategy and adds, per rank, the time spent in
// communication, the share of it hidden behind computation, and peak memory.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/memory_stats.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/cli/world_command.h"
#include "distllm/comm/world.h"
#include "distllm/kernels/fma_peak.h"
#include "distllm/train/model_parallel_groups.h"
#include "distllm/train/trainer.h"

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

struct RankResult {
  double ms_per_step, comm_ms, exposed_ms, peak_mib, rss_mib, peak_gflops, fma_peak_gflops, activation_mib;
  double bf16_peak_gflops;  // vdpbf16ps peak with --compute-dtype bf16, else 0
};

int run_bench_train_impl(Args& args, const comm::ProcessGroupPtr& world) {
  const int rank = world ? world->rank() : 0, n = world ? world->size() : 1;
  const int ranks_here = world ? std::max(1, n / std::max(1, world->num_hosts())) : 1;
  int64_t threads = args.get_int("threads", std::max(1, available_cpus() / ranks_here), "threads per rank");
  DL_CHECK(threads >= 1 && threads <= 1024, "--threads must be in [1, 1024]");
  set_num_threads(static_cast<int>(threads));
  int B = static_cast<int>(args.get_int("batch", 8, "sequences per step, per data-parallel rank"));
  int T = static_cast<int>(args.get_int("seq", 256, "tokens per sequence"));
  int steps = static_cast<int>(args.get_int("steps", 10, "timed steps"));
  int warmup = static_cast<int>(args.get_int("warmup-steps", 2, "untimed warm-up steps"));
  bool breakdown = args.get_flag("breakdown", "print time per kernel family (rank 0)");
  bool json = args.get_flag("json", "print one JSON object instead of text");
  int peak_n = static_cast<int>(args.get_int("peak-size", 2048, "matrix size for the sgemm peak measurement"));
  ParallelConfig pc;
  const std::string mesh =
      args.get_string("mesh", "", "dp=D,tp=T,cp=C or dp=D,pp=P: model-parallel mesh (see train)");
  const bool sequence_parallel = args.get_flag("sequence-parallel", "with --mesh tp=T: Megatron sequence parallelism");
  const int data_ranks = data_parallel_size(mesh, n);
  pc.strategy = parse_strategy(args.get_string("strategy", gradient_reduction_size(mesh, n) > 1 ? "ddp" : "none",
                                               "none | ddp | zero1 | zero2 | zero3 | hsdp"));
  pc.bucket_mb = args.get_double("bucket-mb", pc.bucket_mb, "gradient bucket size, MiB");
  pc.first_bucket_mb = args.get_double("first-bucket-mb", pc.first_bucket_mb, "first bucket size, MiB");
  pc.mixed_precision = parse_mixed_precision(args.get_string("mixed-precision", "fp32", "fp32 | bf16-comm | bf16"));
  pc.reshard_after_forward = args.get_string("reshard-after-forward", "true", "zero3/hsdp") != "false";
  pc.prefetch = !args.get_flag("no-prefetch", "zero3/hsdp: no prefetch");
  pc.shard_size = static_cast<int>(args.get_int("shard-size", 0, "hsdp: ranks per shard group"));
  TrainOptions o;
  o.batch = B, o.seq_len = T, o.steps = warmup + steps;
  o.grad_accum = static_cast<int>(args.get_int("grad-accum", 1, "micro-batches per step"));
  o.micro_batches = static_cast<int>(args.get_int("micro-batches", 1, "with --mesh pp=P: micro-batches per step"));
  o.pipeline_schedule =
      parse_pipeline_schedule(args.get_string("pp-schedule", "1f1b", "with --mesh pp=P: gpipe | 1f1b | interleaved"));
  o.virtual_stages = static_cast<int>(
      args.get_int("virtual-stages", 1, "with --pp-schedule interleaved: model chunks per pipeline stage"));
  o.checkpointing = ActivationCheckpointing::parse(args.get_string("activation-checkpointing", "none", "none | all | every:K"));
  o.compute_dtype = kernels::parse_compute_dtype(
      args.get_string("compute-dtype", "f32", "f32 | bf16: the linear products (MFU also against the bf16 peak)"));
  o.schedule.max_lr = 1e-4, o.schedule.min_lr = 1e-5;
  ModelConfig cfg = model_config_from_flags(args, "gpt2-124M", 0);
  if (args.help_or_finish()) return 0;
  DL_CHECK(steps > 0 && warmup >= 0, "--steps must be positive and --warmup-steps >= 0");
  kernels::check_compute_dtype(o.compute_dtype);
  const bool bf16 = o.compute_dtype == kernels::ComputeDtype::kBf16;

  double peak = measure_sgemm_gflops(peak_n, 3);
  const double fma_peak = kernels::measure_fma_peak_gflops(best_isa());
  const double bf16_peak = bf16 ? kernels::measure_bf16_dot_peak_gflops() : 0.0;
  // Random tokens: enough windows that every rank draws fresh batches.
  std::vector<uint32_t> toks(static_cast<size_t>(std::max<int64_t>(200000, 4LL * B * (T + 1))));
  CounterRng rng(7);
  for (auto& t : toks) t = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  TokenDataset data = TokenDataset::from_tokens(std::move(toks), static_cast<uint32_t>(cfg.vocab_size), "random");

  ModelParallelGroups groups = make_model_parallel_groups(mesh, world, cfg, sequence_parallel, o.virtual_stages);
  if (groups.pipeline.active())
    check_pipeline_schedule(o.pipeline_schedule, groups.pipeline.layers.stages, o.micro_batches, o.virtual_stages);
  DataParallel dp(cfg, pc, o.adamw, groups.data_parallel, groups.tensor_parallel(), groups.context_parallel(),
                  groups.pipeline);
  dp.init_weights(1);
  dp.sync_parameters();
  Trainer trainer(dp, data, nullptr, o);
  std::vector<double> ms;
  std::vector<std::vector<double>> bubbles;  // per timed step, per stage
  CommTime comm;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup && breakdown) {
      Profiler::reset();
      Profiler::set_enabled(true);
    }
    if (world) world->barrier();  // every rank starts the step together
    StepStats st = trainer.step();
    if (s >= warmup) {
      ms.push_back(st.millis);
      comm += st.comm;
      if (!st.stage_bubbles.empty()) bubbles.push_back(st.stage_bubbles);
    }
  }
  Profiler::set_enabled(false);

  const double step_ms = median(ms);
  RankResult mine{step_ms, comm.busy_s * 1e3 / steps, comm.exposed_s * 1e3 / steps,
                  static_cast<double>(MemoryStats::peak()) / (1 << 20), static_cast<double>(peak_rss_bytes()) / (1 << 20),
                  peak, fma_peak, static_cast<double>(trainer.graph().activation_bytes()) / (1 << 20), bf16_peak};
  std::vector<RankResult> all(static_cast<size_t>(n));
  if (world)
    world->allgather(&mine, all.data(), sizeof(RankResult) / sizeof(double), comm::DType::kF64);
  else
    all[0] = mine;
  if (rank != 0) return 0;

  double slowest = 0, comm_ms = 0, exposed_ms = 0, peak_sum = 0, fma_sum = 0, bf16_sum = 0;
  for (const auto& r : all) {
    slowest = std::max(slowest, r.ms_per_step);
    comm_ms += r.comm_ms / n;
    exposed_ms += r.exposed_ms / n;
    peak_sum += r.peak_gflops;
    fma_sum += r.fma_peak_gflops;
    bf16_sum += r.bf16_peak_gflops;
  }
  // Tensor-parallel ranks and pipeline stages share their batch: the data-parallel
  // ranks count.
  const int micro_steps = groups.pipeline.active() ? o.micro_batches : o.grad_accum;
  const double tokens_per_step = static_cast<double>(B) * T * micro_steps * data_ranks;
  // Each stage's median bubble over the timed steps.
  std::vector<double> bubble;
  for (size_t k = 0; !bubbles.empty() && k < bubbles[0].size(); ++k) {
    std::vector<double> v;
    for (const auto& b : bubbles) v.push_back(b[k]);
    bubble.push_back(median(v));
  }
  const double ideal_bubble = groups.pipeline.active()
                                  ? ideal_bubble_fraction(groups.pipeline.layers.stages, o.micro_batches, o.virtual_stages)
                                  : 0.0;
  const int64_t n_params = matmul_params(cfg);
  // PaLM's count: 6 N per token for the matmuls (forward + backward) plus
  // 12 * n_layer * T * attn_dim for attention scores and values.
  const double flops_per_token = 6.0 * n_params + 12.0 * cfg.n_layer * T * cfg.attn_dim();
  const double tok_s = tokens_per_step / (slowest / 1e3);
  const double gflops = flops_per_token * tok_s / 1e9;
  const double hidden = comm_ms > 0 ? std::clamp(1.0 - exposed_ms / comm_ms, 0.0, 1.0) : 1.0;
  if (json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : all)
      ranks.push_back({{"ms_per_step", r.ms_per_step}, {"comm_ms", r.comm_ms}, {"comm_exposed_ms", r.exposed_ms},
                       {"peak_mem_mib", r.peak_mib}, {"peak_rss_mib", r.rss_mib},
                       {"activation_mib", r.activation_mib}});
    nlohmann::json j = {{"impl", "distllm"}, {"model", cfg.describe()}, {"strategy", strategy_name(pc.strategy)},
                        {"mesh", groups.describe()}, {"sequence_parallel", sequence_parallel},
                        {"ranks", n}, {"batch", B}, {"seq", T}, {"threads", num_threads()},
                        {"ms_per_step", slowest}, {"tokens_per_s", tok_s}, {"gflops", gflops},
                        {"peak_gflops", peak_sum}, {"mfu", gflops / peak_sum},
                        {"fma_peak_gflops", fma_sum}, {"fma_isa", isa_name(best_isa())}, {"mfu_fma", gflops / fma_sum},
                        {"compute_dtype", kernels::compute_dtype_name(o.compute_dtype)},
                        {"flops_per_token", flops_per_token},
                        {"comm_ms", comm_ms}, {"comm_exposed_ms", exposed_ms}, {"comm_hidden", hidden},
                        {"per_rank", ranks}};
    if (bf16) {
      j["bf16_peak_gflops"] = bf16_sum;
      j["mfu_bf16"] = gflops / bf16_sum;
    }
    if (!bubble.empty()) {
      j["pp_schedule"] = pipeline_schedule_name(o.pipeline_schedule);
      j["micro_batches"] = o.micro_batches;
      j["virtual_stages"] = o.virtual_stages;
      j["bubble"] = bubble;
      j["bubble_ideal"] = ideal_bubble;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model:       %s\n", cfg.describe().c_str());
  std::printf("parallel:    %s\n", dp.describe().c_str());
  std::printf("compute:     %s linear products\n", kernels::compute_dtype_name(o.compute_dtype));
  if (groups.mesh) std::printf("mesh:        %s\n", groups.describe().c_str());
  std::printf("shape:       batch %d x seq %d per data-parallel rank, %d rank%s x %d thread%s, %d timed steps (median)\n", B, T, n,
              n == 1 ? "" : "s", num_threads(), num_threads() == 1 ? "" : "s", steps);
  std::printf("ms/step:     %.1f (slowest rank)\n", slowest);
  if (!bubble.empty()) {
    std::string per;
    for (double b : bubble) per += strprintf(" %.1f%%", 100 * b);
    std::printf("bubble:     %s per stage (median; %s, %d micro-batches, %d chunk%s per stage: ideal (p-1)/(v*m+p-1) = "
                "%.1f%%)\n",
                per.c_str(), pipeline_schedule_name(o.pipeline_schedule), o.micro_batches, o.virtual_stages,
                o.virtual_stages == 1 ? "" : "s", 100 * ideal_bubble);
  }
  std::printf("tokens/s:    %.0f (the job)\n", tok_s);
  std::printf("GFLOP/s:     %.1f  (%.3g GFLOP/step: 6 x %.2fM matmul params + attention, per token)\n", gflops,
              flops_per_token * tokens_per_step / 1e9, n_params / 1e6);
  std::printf("FMA peak:    %.1f GFLOP/s (%s FMAs on every thread, sum over ranks measured concurrently)\n", fma_sum,
              isa_name(best_isa()));
  std::printf("sgemm peak:  %.1f GFLOP/s (OpenBLAS, %dx%d, sum over ranks measured concurrently)\n", peak_sum, peak_n,
              peak_n);
  if (bf16)
    std::printf("bf16 peak:   %.1f GFLOP/s (vdpbf16ps on every thread, sum over ranks measured concurrently)\n",
                bf16_sum);
  std::printf("MFU:         %.1f%% of the FMA peak, %.1f%% of OpenBLAS's sgemm", 100.0 * gflops / fma_sum,
              100.0 * gflops / peak_sum);
  if (bf16) std::printf(", %.1f%% of the bf16 peak", 100.0 * gflops / bf16_sum);
  std::printf("\n");
  if (n > 1 || comm_ms > 0)
    std::printf("comm:        %.1f ms/step, %.1f ms exposed: %.0f%% hidden behind compute (mean over ranks)\n", comm_ms,
                exposed_ms, 100 * hidden);
  std::printf("\n%-6s %10s %10s %12s %9s %12s %12s\n", "rank", "ms/step", "comm ms", "exposed ms", "hidden", "peak MiB",
              "peak RSS MiB");
  for (int r = 0; r < n; ++r) {
    const RankResult& x = all[static_cast<size_t>(r)];
    double h = x.comm_ms > 0 ? std::clamp(1.0 - x.exposed_ms / x.comm_ms, 0.0, 1.0) : 1.0;
    std::printf("%-6d %10.1f %10.2f %12.2f %8.0f%% %12.1f %12.1f\n", r, x.ms_per_step, x.comm_ms, x.exposed_ms, 100 * h,
                x.peak_mib, x.rss_mib);
  }
  if (breakdown) {
    std::printf("\n%-22s %10s %8s   (rank 0)\n", "region", "ms/step", "share");
    double total = 0;
    for (const auto& e : Profiler::snapshot()) total += e.seconds;
    for (const auto& e : Profiler::snapshot())
      std::printf("%-22s %10.2f %7.1f%%\n", e.name.c_str(), e.seconds * 1e3 / steps,
                  100.0 * e.seconds / (step_ms * steps / 1e3));
    std::printf("%-22s %10.2f %7.1f%%\n", "(sum of regions)", total * 1e3 / steps,
                100.0 * total / (step_ms * steps / 1e3));
  }
  return 0;
}

int run_bench_train(Args& args) { return run_on_world(args, run_bench_train_impl); }

DISTLLM_REGISTER_COMMAND("bench train",
                         "training throughput, MFU, communication hidden and memory per rank (any strategy, mpirun)",
                         run_bench_train);

}  // namespace
}  // namespace distllm
