// `distllm plan`: per-rank memory by category, communication per step and an
// estimated step time for a training job, per strategy and layout (dp x tp x pp x
// cp); with --memory-gb, the fastest that fits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/plan/plan.h"

namespace distllm {
namespace {

std::string mb(int64_t bytes) { return strprintf("%.1f", static_cast<double>(bytes) / 1e6); }

// --tp/--pp/--cp: 'all' (0: every size compare() finds) or a size dividing --world.
int parse_size(const char* flag, const std::string& text, int world) {
  if (text == "all") return 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  DL_CHECK(!text.empty() && *end == '\0' && v >= 1 && v <= world && world % v == 0,
           "--%s must be 'all' or a whole number dividing --world (%d), got '%s'", flag, world, text.c_str());
  return static_cast<int>(v);
}

int run_plan(Args& args) {
  plan::PlanInput in;
  in.world = static_cast<int>(args.get_int("world", 1, "ranks (world / (tp x pp x cp) of them data parallel)"));
  const std::string tp = args.get_string("tp", "1", "tensor-parallel size, or 'all': every size that splits the model");
  const std::string pp = args.get_string("pp", "1", "pipeline stages, or 'all': every size up to one layer per stage");
  const std::string cp =
      args.get_string("cp", "1", "context-parallel size, or 'all': every size that cuts --seq into 2 x cp chunks");
  in.micro_batches = static_cast<int>(args.get_int("micro-batches", 1, "with --pp: micro-batches of --batch per step"));
  in.pp_schedule =
      parse_pipeline_schedule(args.get_string("pp-schedule", "1f1b", "with --pp: gpipe | 1f1b | interleaved"));
  in.virtual_stages = static_cast<int>(
      args.get_int("virtual-stages", 1, "with --pp-schedule interleaved: model chunks per stage (>= 2)"));
  DL_CHECK(in.virtual_stages == 1 || in.pp_schedule == PipelineScheduleKind::kInterleaved,
           "--virtual-stages %d needs --pp-schedule interleaved", in.virtual_stages);
  in.sequence_parallel = args.get_flag("sequence-parallel", "with tp > 1: Megatron sequence parallelism");
  in.hosts = static_cast<int>(args.get_int("hosts", 1, "hosts the ranks span (hsdp shards inside a host)"));
  in.batch = static_cast<int>(args.get_int("batch", 8, "sequences per micro-batch, per data-parallel rank"));
  in.seq = static_cast<int>(args.get_int("seq", 256, "tokens per sequence"));
  in.grad_accum = static_cast<int>(args.get_int("grad-accum", 1, "micro-batches per optimizer step"));
  std::string strategy = args.get_string("strategy", "all", "ddp | zero1 | zero2 | zero3 | hsdp | none | all");
  in.parallel.mixed_precision =
      parse_mixed_precision(args.get_string("mixed-precision", "fp32", "fp32 | bf16-comm | bf16"));
  in.parallel.bucket_mb = args.get_double("bucket-mb", in.parallel.bucket_mb, "gradient bucket size, MiB");
  in.parallel.shard_size = static_cast<int>(args.get_int("shard-size", 0, "hsdp: ranks per shard group"));
  in.parallel.reshard_after_forward =
      args.get_string("reshard-after-forward", "true", "zero3/hsdp: free gathered parameters after forward") != "false";
  in.checkpointing = ActivationCheckpointing::parse(
      args.get_string("activation-checkpointing", "none", "none | all | every:K"));
  double memory_gb = args.get_double("memory-gb", 0, "memory per rank: recommend the fastest strategy that fits");
  int threads = static_cast<int>(args.get_int("threads", std::max(1, available_cpus() / 1), "threads per rank"));
  double gemm = args.get_double("gemm-gflops", 0, "GEMM rate per rank (default: measured here)");
  double busbw = args.get_double("busbw-gbs", 0, "collective bus bandwidth, GB/s (default: from measured memory bandwidth)");
  in.model = model_config_from_flags(args, "gpt2-124M", 0);
  if (args.help_or_finish()) return 0;
  DL_CHECK(in.world >= 1 && in.hosts >= 1 && in.world % in.hosts == 0, "--world must be a multiple of --hosts");
  in.tp = parse_size("tp", tp, in.world);
  in.pp = parse_size("pp", pp, in.world);
  in.cp = parse_size("cp", cp, in.world);
  const int fixed = std::max(1, in.tp) * std::max(1, in.pp) * std::max(1, in.cp);
  DL_CHECK(in.world % fixed == 0, "--tp %s x --pp %s x --cp %s does not divide --world %d", tp.c_str(), pp.c_str(),
           cp.c_str(), in.world);
  DL_CHECK(in.micro_batches >= 1, "--micro-batches must be >= 1, got %d", in.micro_batches);
  DL_CHECK(in.micro_batches == 1 || in.pp != 1,
           "--micro-batches %d needs --pp > 1 (or 'all'); use --grad-accum without a pipeline", in.micro_batches);
  DL_CHECK(in.grad_accum == 1 || in.pp == 1,
           "--grad-accum %d with --pp %s: a pipeline accumulates its --micro-batches instead", in.grad_accum, pp.c_str());

  plan::MachineRates rates;
  if (gemm > 0 && busbw > 0) {
    rates.gemm_gflops = gemm, rates.busbw_gbs = busbw, rates.source = "given";
  } else {
    rates = plan::measure_rates(std::max(1, threads));
    if (gemm > 0) rates.gemm_gflops = gemm;
    if (busbw > 0) rates.busbw_gbs = busbw;
  }
  const double limit = memory_gb > 0 ? memory_gb * 1e9 : 0;
  std::vector<plan::Estimate> rows;
  if (strategy == "all") {
    rows = plan::compare(in, rates, limit);
  } else {
    in.parallel.strategy = parse_strategy(strategy);
    DL_CHECK(in.tp >= 1 && in.pp >= 1 && in.cp >= 1, "--%s all needs --strategy all",
             in.tp == 0 ? "tp" : in.pp == 0 ? "pp" : "cp");
    rows.push_back(plan::estimate(in, rates, limit));
  }
  std::printf("model:  %s\n", in.model.describe().c_str());
  std::printf("job:    %d rank%s on %d host%s, batch %d x %d tokens per data-parallel rank, %d accumulation step(s), %s\n",
              in.world,
              in.world == 1 ? "" : "s", in.hosts, in.hosts == 1 ? "" : "s", in.batch, in.seq, in.grad_accum,
              mixed_precision_name(in.parallel.mixed_precision));
  if (in.pp != 1)
    std::printf("pipe:   %d micro-batches per step, %s schedule\n", in.micro_batches,
                pipeline_schedule_name(in.pp_schedule));
  std::printf("rates:  GEMM %.1f GFLOP/s per rank, bus bandwidth %.1f GB/s (%s)\n", rates.gemm_gflops,
              rates.busbw_gbs, rates.source.c_str());
  std::printf("note:   times assume the ranks have their cores to themselves; on a busy host (other jobs, a "
              "shared VM) steps run slower than estimated\n\n");
  // The first two columns as wide as their longest entry.
  int sw = 22, lw = 6;
  for (const plan::Estimate& e : rows) {
    sw = std::max(sw, static_cast<int>(plan::describe_strategy(e).size()));
    lw = std::max(lw, static_cast<int>(plan::describe_layout(e).size()));
  }
  std::printf("%-*s %-*s %8s %8s %8s %8s %8s %8s %8s %8s | %9s %8s %8s %8s %9s%s\n", sw, "strategy (MB per rank)",
              lw, "layout", "params", "master", "grads", "optim", "activ", "gathered", "buffers", "total", "comm MB",
              "step s", "bubble", "exposed", "tok/s", limit > 0 ? "  fits" : "");
  for (const plan::Estimate& e : rows) {
    const plan::MemoryPlan& m = e.memory;
    std::printf("%-*s %-*s %8s %8s %8s %8s %8s %8s %8s %8s | %9.1f %8.3f %8.3f %8.3f %9.0f%s\n", sw,
                plan::describe_strategy(e).c_str(), lw, plan::describe_layout(e).c_str(), mb(m.params).c_str(),
                mb(m.master).c_str(), mb(m.grads).c_str(), mb(m.optimizer).c_str(), mb(m.activations).c_str(),
                mb(m.gathered).c_str(), mb(m.comm_buffers).c_str(), mb(m.total()).c_str(), e.comm_bytes / 1e6, e.step_s,
                e.bubble_s, e.exposed_comm_s, e.tokens_per_s,
                limit > 0 ? (e.fits ? "  yes" : "  no") : "");
  }
  if (limit > 0) {
    plan::Estimate best = plan::recommend(in, rates, limit);
    std::printf("\nrecommended for %.2f GB per rank: %s (%.1f MB, about %.0f tokens/s)\n", memory_gb,
                plan::describe_choice(best).c_str(), best.memory.total() / 1e6, best.tokens_per_s);
  }
  return 0;
}

DISTLLM_REGISTER_COMMAND("plan", "memory, communication and step-time estimate per strategy and dp x tp x pp x cp layout",
                         run_plan);

}  // namespace
}  // namespace distllm
