// `distllm train`: train a GPT-2 or Llama model on one process, or on N ranks under
// `mpirun -np N` / `srun --mpi=pmix` with the data-parallel strategy --strategy names.
#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/memory_stats.h"
#include "distllm/base/parallel.h"
#include "distllm/cli/command.h"
#include "distllm/cli/world_command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/cli/train_fit.h"
#include "distllm/cli/train_report.h"
#include "distllm/comm/errors.h"
#include "distllm/comm/text_collectives.h"
#include "distllm/comm/world.h"
#include "distllm/io/file_util.h"
#include "distllm/launch/rank_agent.h"
#include "distllm/model/hf_cache.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/model_dir.h"
#include "distllm/plan/plan.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/train/checkpointing.h"
#include "distllm/train/model_parallel_groups.h"
#include "distllm/train/rank_consistency.h"
#include "distllm/train/trainer.h"

namespace distllm {
namespace {

// Byte-level tokens (vocabulary 256) from a text file: until a tokenizer is chosen,
// any text trains. The last `val_fraction` of the bytes is held out.
void byte_datasets(const std::string& path, double val_fraction, std::unique_ptr<TokenDataset>& train,
                   std::unique_ptr<TokenDataset>& val) {
  std::string text = read_file(path);
  DL_CHECK(!text.empty(), "%s: empty text file", path.c_str());
  size_t n_val = static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  std::vector<uint32_t> tr(text.begin(), text.end() - static_cast<long>(n_val));
  for (auto& t : tr) t &= 0xffu;
  train = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(tr), 256, path));
  train->set_text_bytes(train->size());  // one token per byte
  if (n_val > 0) {
    std::vector<uint32_t> va(text.end() - static_cast<long>(n_val), text.end());
    for (auto& t : va) t &= 0xffu;
    val = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(va), 256, path + " (val)"));
    val->set_text_bytes(val->size());
  }
}

// A fingerprint of a dataset's contents that is cheap to take: its size, shard
// count, and a hash of a few windows spread over it.
std::string data_fingerprint(const TokenDataset& d) {
  uint64_t h = d.size() ^ (static_cast<uint64_t>(d.num_shards()) << 48);
  const uint64_t windows = d.num_windows(63);
  std::vector<int32_t> w(64);
  for (uint64_t k = 0; k < 16 && windows > 0; ++k) {
    d.window(k * windows / 16, 63, w.data());
    for (int32_t t : w) h = (h ^ static_cast<uint32_t>(t)) * 0x100000001B3ull;
  }
  return strprintf("%llu tokens, %zu shards, hash %016llx", (unsigned long long)d.size(), d.num_shards(),
                   (unsigned long long)h);
}

ConfigFields job_fields(const ModelConfig& cfg, const TrainOptions& o, const ParallelConfig& pc,
                        const TokenDataset& train, const TokenDataset* val, const std::string& init_from) {
  ConfigFields f;
  f.emplace_back("model config", cfg.to_hf_json().dump());
  f.emplace_back("--batch", std::to_string(o.batch));
  f.emplace_back("--seq", std::to_string(o.seq_len));
  f.emplace_back("--grad-accum", std::to_string(o.grad_accum));
  f.emplace_back("--micro-batches", std::to_string(o.micro_batches));
  f.emplace_back("--pp-schedule", pipeline_schedule_name(o.pipeline_schedule));
  f.emplace_back("--virtual-stages", std::to_string(o.virtual_stages));
  f.emplace_back("--steps", std::to_string(o.steps));
  f.emplace_back("--lr", strprintf("%.17g", o.schedule.max_lr));
  f.emplace_back("--min-lr", strprintf("%.17g", o.schedule.min_lr));
  f.emplace_back("--warmup", std::to_string(o.schedule.warmup_steps));
  f.emplace_back("--schedule", o.schedule.kind);
  f.emplace_back("--beta1", strprintf("%.17g", o.adamw.beta1));
  f.emplace_back("--beta2", strprintf("%.17g", o.adamw.beta2));
  f.emplace_back("--adam-eps", strprintf("%.17g", o.adamw.eps));
  f.emplace_back("--weight-decay", strprintf("%.17g", o.adamw.weight_decay));
  f.emplace_back("--clip", strprintf("%.17g", o.adamw.grad_clip));
  f.emplace_back("--seed", std::to_string(o.seed));
  f.emplace_back("--eval-every", std::to_string(o.eval_every));
  f.emplace_back("--eval-batches", std::to_string(o.eval_batches));
  f.emplace_back("--time-limit", strprintf("%.17g", o.time_limit_seconds));
  f.emplace_back("--activation-checkpointing", o.checkpointing.describe());
  f.emplace_back("--compute-dtype", kernels::compute_dtype_name(o.compute_dtype));
  f.emplace_back("--strategy", strategy_name(pc.strategy));
  f.emplace_back("--bucket-mb", strprintf("%.17g", pc.bucket_mb));
  f.emplace_back("--first-bucket-mb", strprintf("%.17g", pc.first_bucket_mb));
  f.emplace_back("--mixed-precision", mixed_precision_name(pc.mixed_precision));
  f.emplace_back("--reshard-after-forward", pc.reshard_after_forward ? "true" : "false");
  f.emplace_back("--prefetch", pc.prefetch ? "true" : "false");
  f.emplace_back("--shard-size", std::to_string(pc.shard_size));
  f.emplace_back("--init-from", init_from);
  f.emplace_back("training data", data_fingerprint(train));
  f.emplace_back("validation data", val ? data_fingerprint(*val) : "none");
  return f;
}

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  throw_error(strprintf("--%s must be true or false, got '%s'", flag.c_str(), v.c_str()));
}

// Every rank's communication time and memory for the log (one small all-gather).
std::vector<RankFigures> gather_rank_figures(DataParallel& dp, const CommTime& comm) {
  double mine[4] = {comm.busy_s * 1e3, comm.exposed_s * 1e3, static_cast<double>(MemoryStats::peak()),
                    static_cast<double>(peak_rss_bytes())};
  const int n = dp.world_size();
  std::vector<double> all(4 * static_cast<size_t>(n));
  if (n == 1) {
    std::copy(mine, mine + 4, all.begin());
  } else {
    dp.world()->allgather(mine, all.data(), 4, comm::DType::kF64);
  }
  std::vector<RankFigures> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    out[r].comm_busy_ms = all[4 * r];
    out[r].comm_exposed_ms = all[4 * r + 1];
    out[r].peak_bytes = static_cast<int64_t>(all[4 * r + 2]);
    out[r].peak_rss_bytes = static_cast<int64_t>(all[4 * r + 3]);
  }
  return out;
}

// Test hooks: DISTLLM_TEST_KILL_RANK=r and DISTLLM_TEST_KILL_STEP=s make rank r die
// (SIGKILL) in the middle of step s, after its forward pass, while the other ranks
// are in backward with reductions in flight; DISTLLM_TEST_HANG_RANK/STEP make it
// stop there without dying (a hung rank). Only in a job's first attempt
// (DISTLLM_RESTART_COUNT unset or 0), so `distllm launch` can restart it.
// DISTLLM_TEST_STEP_DELAY_MS=m slows every step by m ms (every attempt), so a test
// can signal a job in the middle of a run of a tiny model.
std::function<void(int64_t)> fault_hook(int rank) {
  if (const char* d = std::getenv("DISTLLM_TEST_STEP_DELAY_MS")) {
    const int ms = std::atoi(d);
    return [ms](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  }
  const char* restarts = std::getenv("DISTLLM_RESTART_COUNT");
  if (restarts && std::atoi(restarts) != 0) return nullptr;
  for (const char* kind : {"KILL", "HANG"}) {
    const char* r = std::getenv(strprintf("DISTLLM_TEST_%s_RANK", kind).c_str());
    const char* s = std::getenv(strprintf("DISTLLM_TEST_%s_STEP", kind).c_str());
    if (!r || !s || std::atoi(r) != rank) continue;
    const int64_t step = std::atoll(s);
    const bool hang = kind[0] == 'H';
    return [step, hang](int64_t current) {
      if (current != step) return;
      if (!hang) std::raise(SIGKILL);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    };
  }
  return nullptr;
}

// SIGUSR1 / SIGTERM (Slurm's preemption warning, an orchestrator's stop): finish
// the current step, save a checkpoint, exit. A second one exits at once.
std::atomic<bool>& stop_signal() {
  static std::atomic<bool> flag{false};
  return flag;
}

void on_stop_signal(int sig) {
  if (stop_signal().exchange(true)) {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

int run_train_impl(Args& args, const comm::ProcessGroupPtr& world) {
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  const int rank = world ? world->rank() : 0;
  const int world_size = world ? world->size() : 1;
  // Threads: the host's CPUs shared among the ranks on it.
  const int ranks_here = world ? std::max(1, world_size / std::max(1, world->num_hosts())) : 1;
  int64_t threads = args.get_int("threads", std::max(1, available_cpus() / ranks_here),
                                 "threads per rank for kernels and BLAS (default: CPUs / ranks on this host)");
  DL_CHECK(threads >= 1 && threads <= 1024, "--threads must be in [1, 1024], got %lld", (long long)threads);
  set_num_threads(static_cast<int>(threads));

  auto data = args.get_optional("data", "token file or prepared data directory (see `distllm data prepare`)");
  auto val_data = args.get_optional("val-data", "validation token file/directory (default: the data dir's val split)");
  auto text = args.get_optional("text", "train byte-level (vocabulary 256) on this text file instead of --data");
  double val_fraction = args.get_double("val-fraction", 0.05, "held-out fraction of --text for validation");
  auto init_from = args.get_optional(
      "init-from", "start from this Hugging Face model directory (or hub cache folder, or cached id ORG/NAME)");
  if (init_from) init_from = resolve_model_dir(*init_from);

  TrainOptions o;
  o.batch = args.get_int_in("batch", 8, 1, TrainOptions::kMaxBatch, "sequences per micro-batch, per rank");
  o.seq_len = args.get_int_in("seq", 256, 1, ModelConfig::kMaxPositions, "tokens per sequence");
  o.grad_accum = args.get_int_in("grad-accum", 1, 1, TrainOptions::kMaxMicroSteps, "micro-batches per optimizer step");
  o.micro_batches = args.get_int_in("micro-batches", 1, 1, TrainOptions::kMaxMicroSteps,
                                    "pipeline parallelism (--mesh pp=P): micro-batches of --batch per step");
  o.pipeline_schedule = parse_pipeline_schedule(
      args.get_string("pp-schedule", "1f1b", "pipeline parallelism: gpipe | 1f1b | interleaved (see docs/parallelism.md)"));
  o.virtual_stages = args.get_int_in("virtual-stages", 1, 1, ModelConfig::kMaxLayers,
                                     "with --pp-schedule interleaved: model chunks per pipeline stage (V >= 2)");
  o.steps = args.get_int("steps", 100, "optimizer steps");
  o.schedule.max_lr = args.get_double("lr", 6e-4, "peak learning rate");
  o.schedule.min_lr = args.get_double("min-lr", -1, "final learning rate (default lr/10)");
  o.schedule.warmup_steps = args.get_int("warmup", 0, "linear warmup steps");
  o.schedule.kind = args.get_string("schedule", "cosine", "cosine | constant");
  o.adamw.beta1 = args.get_double("beta1", 0.9, "AdamW beta1");
  o.adamw.beta2 = args.get_double("beta2", 0.95, "AdamW beta2");
  o.adamw.eps = args.get_double("adam-eps", 1e-8, "AdamW epsilon");
  o.adamw.weight_decay = args.get_double("weight-decay", 0.1, "decoupled weight decay (matrices and embeddings)");
  o.adamw.grad_clip = args.get_double("clip", 1.0, "max global gradient norm (0: off)");
  o.seed = static_cast<uint64_t>(args.get_int("seed", 1337, "seed for initialisation and data order"));
  o.eval_every = args.get_int("eval-every", 0, "evaluate every N steps (0: at start and end only)");
  o.eval_batches = args.get_int_in("eval-batches", 8, 1, TrainOptions::kMaxEvalBatches,
                                   "validation batches per evaluation (per rank)");
  o.time_limit_seconds = args.get_double("time-limit", 0, "stop after this many seconds of training (0: none)");
  o.checkpointing = ActivationCheckpointing::parse(args.get_string(
      "activation-checkpointing", "none", "none | all | every:K: keep only these layers' inputs, recompute in backward"));
  o.compute_dtype = kernels::parse_compute_dtype(args.get_string(
      "compute-dtype", "f32", "f32 | bf16: the linear layers' products (bf16 inputs, f32 sums and master weights; "
                              "needs AVX512_BF16, see docs/training.md)"));
  kernels::check_compute_dtype(o.compute_dtype);  // before any data is read

  const std::string mesh_text = args.get_string(
      "mesh", "", "dp=D,tp=T,cp=C or dp=D,pp=P (any order, the last varies fastest): tensor-parallel groups of T "
                  "ranks, context-parallel rings of C ranks (ring attention; --seq a multiple of C), pipelines of P "
                  "stages (--micro-batches, --pp-schedule), data parallel (--strategy) across D; dp may be left out "
                  "(default: every rank data parallel)");
  const bool sequence_parallel = args.get_flag(
      "sequence-parallel", "with --mesh tp=T: also split the norms and the residual stream along the sequence "
                           "(Megatron-SP: reduce-scatter / all-gather in place of all-reduce)");
  std::string strategy = args.get_string("strategy", gradient_reduction_size(mesh_text, world_size) > 1 ? "ddp" : "none",
                                         "none | ddp | zero1 | zero2 | zero3 | hsdp | auto (ask `distllm plan`)");
  ParallelConfig pc;
  pc.bucket_mb = args.get_double("bucket-mb", pc.bucket_mb, "gradient bucket size, MiB (see docs/training.md)");
  pc.first_bucket_mb = args.get_double("first-bucket-mb", pc.first_bucket_mb, "size of the first (earliest) bucket");
  pc.mixed_precision = parse_mixed_precision(
      args.get_string("mixed-precision", "fp32", "fp32 | bf16-comm (bf16 gradients) | bf16 (also bf16 parameters)"));
  pc.reshard_after_forward = parse_bool(
      "reshard-after-forward",
      args.get_string("reshard-after-forward", "true", "zero3/hsdp: free gathered parameters after forward"));
  pc.prefetch = !args.get_flag("no-prefetch", "zero3/hsdp: do not gather the next group ahead of use");
  pc.check_replicas = args.get_flag("check-replicas", "debug: check replicated parameters are identical after every step");
  pc.shard_size = args.get_int_in("shard-size", 0, 0, 1 << 20, "hsdp: ranks per shard group (default: ranks per host)");
  double memory_gb = args.get_double("memory-gb", 0, "memory per rank: the run is refused when it needs more, and "
                                     "--strategy auto picks what fits (default: the host's share)");

  CheckpointOptions ck;
  ck.dir = args.get_string("checkpoint-dir", "", "write checkpoints (sharded, atomic) into this directory");
  ck.every = args.get_int("checkpoint-every", 0, "save a checkpoint every N steps (0: at the end and on a stop signal)");
  ck.resume = args.get_string("resume", "", "auto (the checkpoint `latest` names in --checkpoint-dir, else the newest "
                                            "good one of this run; step 0 if there is none yet) or a step directory; "
                                            "under Slurm a requeued job (SLURM_RESTART_COUNT >= 1) resumes "
                                            "automatically");
  ck.start_over = args.get_flag("start-over", "start at step 0 although --checkpoint-dir holds checkpoints (with "
                                              "--resume auto: only when none of them can be continued); they are "
                                              "kept, except those of the steps this run saves");
  ck.resume_other_run = args.get_flag("resume-other-run", "let --resume continue a checkpoint written with other "
                                                          "settings (seed, data, learning rate or schedule, "
                                                          "optimizer) with this run's settings");
  ck.retention.keep_last = args.get_int_in("keep-last", 3, 0, 1 << 20,
                                           "this run's checkpoints to keep (the newest; other runs' are never removed)");
  ck.retention.keep_every = args.get_int("keep-every", 0, "also keep every checkpoint whose step is a multiple of M");
  ck.async = parse_bool("checkpoint-async", args.get_string("checkpoint-async", "true",
                                                            "write checkpoints in the background (true|false)"));
  auto out = args.get_optional("out", "save the trained model here (Hugging Face layout): a new or empty folder, "
                                      "or a model directory distllm wrote");
  const bool overwrite = args.get_flag("overwrite", "let --out name a non-empty folder that is not a model directory "
                                                    "(only model files in it are replaced)");
  int64_t log_every = args.get_int("log-every", 1, "print one line every N steps");
  std::string progress = args.get_string("progress", "auto", "auto | on | off: a live progress line on a terminal");
  std::string metrics_file = args.get_string("metrics-file", "", "append one JSON object per step and evaluation");
  std::string plot = args.get_string("plot", "", "write the loss curve (SVG) here (default: next to --out or "
                                                  "--metrics-file)");
  DL_CHECK(log_every >= 1, "--log-every must be >= 1");

  std::unique_ptr<TokenDataset> train, val;
  int vocab_hint = 0;
  if (text) {
    DL_CHECK(!data, "give either --data or --text, not both");
    byte_datasets(*text, val_fraction, train, val);
    vocab_hint = 256;
  } else {
    DL_CHECK(data.has_value() || args.help_requested(), "no training data: pass --data DIR|FILE or --text FILE");
    if (data) {
      train = std::make_unique<TokenDataset>(TokenDataset::open(*data, "train"));
      if (val_data) {
        val = std::make_unique<TokenDataset>(TokenDataset::open(*val_data, "val"));
      } else if (is_directory(*data) && TokenDataset::has_split(*data, "val")) {
        val = std::make_unique<TokenDataset>(TokenDataset::open(*data, "val"));  // a broken val split is an error
      } else if (is_directory(*data) && rank == 0) {
        LOG_WARN("%s has no validation split; training without evaluation", data->c_str());
      }
      vocab_hint = static_cast<int>(train->vocab_size());
    }
  }
  ModelConfig cfg = model_config_from_flags(args, "gpt2-tiny", vocab_hint);
  if (args.help_or_finish()) return 0;
  if (o.schedule.min_lr < 0) o.schedule.min_lr = o.schedule.max_lr / 10;
  if (ck.resume.empty() && !ck.dir.empty()) {
    const char* restarts = std::getenv("SLURM_RESTART_COUNT");
    if (restarts && std::atoi(restarts) >= 1) ck.resume = "auto";  // a requeued Slurm job continues
  }
  if (init_from) cfg = load_hf_config(*init_from);

  if (strategy == "auto") {
    plan::PlanInput in;
    in.model = cfg;
    in.world = world_size;
    in.hosts = world ? world->num_hosts() : 1;
    in.batch = o.batch;
    in.seq = o.seq_len;
    in.grad_accum = o.grad_accum;
    in.checkpointing = o.checkpointing;
    in.parallel = pc;
    plan::MachineRates rates = plan::default_rates(static_cast<int>(threads));
    double limit = memory_gb > 0 ? memory_gb * 1e9 : plan::host_memory_bytes() * 0.8 / ranks_here;
    plan::Estimate best = plan::recommend(in, rates, limit);
    pc.strategy = best.input.parallel.strategy;
    o.checkpointing = best.input.checkpointing;
    if (rank == 0)
      std::printf("strategy auto: %s (%.1f MB per rank of %.1f MB allowed, about %.0f tok/s estimated)\n",
                  plan::describe_strategy(best).c_str(), best.memory.total() / 1e6, limit / 1e6, best.tokens_per_s);
  } else {
    pc.strategy = parse_strategy(strategy);
  }
  if (world) {
    // A rank with another mesh would wait in collectives its peers never issue.
    ConfigFields fields = job_fields(cfg, o, pc, *train, val.get(), init_from.value_or(""));
    fields.emplace_back("--mesh", mesh_text);
    fields.emplace_back("--sequence-parallel", sequence_parallel ? "true" : "false");
    check_same_on_all_ranks(*world, fields);
  }
  if (out) {
    // Rank 0 writes the model: it checks the folder now, not after the whole run,
    // and every rank stops with its verdict.
    std::string problem;
    if (rank == 0) {
      try {
        check_model_output(*out, overwrite, cfg.num_parameters() * int64_t(sizeof(float)) + (int64_t(16) << 20));
      } catch (const Error& e) {
        problem = e.what();
      }
    }
    problem = comm::broadcast_text(world.get(), problem);
    DL_CHECK(problem.empty(), "--out %s", problem.c_str());
  }

  ModelParallelGroups groups = make_model_parallel_groups(mesh_text, world, cfg, sequence_parallel, o.virtual_stages);
  DL_CHECK(groups.pipeline.active() || o.micro_batches == 1,
           "--micro-batches %d needs pipeline parallelism (--mesh pp=P); use --grad-accum otherwise", o.micro_batches);
  if (groups.pipeline.active())
    check_pipeline_schedule(o.pipeline_schedule, groups.pipeline.layers.stages, o.micro_batches, o.virtual_stages);
  DL_CHECK(o.seq_len <= cfg.max_position, "sequence length %d exceeds the model's context (%d)", o.seq_len,
           cfg.max_position);
  {
    // What the run will hold, against this rank's share of the host, before any of it is allocated.
    plan::PlanInput in;
    in.model = cfg;
    in.world = world_size;
    in.tp = groups.plan ? groups.plan->size() : 1;
    in.pp = groups.pipeline.active() ? groups.pipeline.layers.stages : 1;
    in.cp = groups.cp_comm ? groups.cp_comm->size() : 1;
    in.sequence_parallel = sequence_parallel;
    in.hosts = world ? world->num_hosts() : 1;
    in.batch = o.batch;
    in.seq = o.seq_len;
    in.grad_accum = o.grad_accum;
    in.micro_batches = o.micro_batches;
    in.pp_schedule = o.pipeline_schedule;
    in.virtual_stages = o.virtual_stages;
    in.parallel = pc;
    in.checkpointing = o.checkpointing;
    const int64_t micro = groups.pipeline.active() ? o.micro_batches : o.grad_accum;
    const int64_t batch_bytes = int64_t{16} * o.batch * o.seq_len * micro;  // tokens and targets, and their cp blocks
    check_run_fits(in, memory_gb > 0 ? memory_gb * 1e9 : static_cast<double>(usable_memory_bytes()) / ranks_here,
                   ranks_here, batch_bytes);
  }
  DataParallel dp(cfg, pc, o.adamw, groups.data_parallel, groups.tensor_parallel(), groups.context_parallel(),
                  groups.pipeline);
  if (init_from) {
    std::unique_ptr<Transformer> loaded = load_hf_model(*init_from);
    dp.load_full(loaded->params());
  } else {
    dp.init_weights(o.seed);
  }
  dp.sync_parameters();

  const bool lead = rank == 0;
  // Tensor-parallel ranks share their batch: the data-parallel ranks count.
  const int data_ranks = dp.data_ranks();
  const int micro_steps = groups.pipeline.active() ? o.micro_batches : o.grad_accum;
  const double tokens_per_step = static_cast<double>(o.batch) * o.seq_len * micro_steps * data_ranks;
  if (lead) {
    std::printf("model: %s\n", cfg.describe().c_str());
    std::printf("data: %s, %llu tokens%s\n", train->origin().c_str(), (unsigned long long)train->size(),
                val ? strprintf("; validation %llu tokens", (unsigned long long)val->size()).c_str() : "");
    std::printf("parallel: %s; %lld thread%s per rank\n", dp.describe().c_str(), (long long)threads,
                threads == 1 ? "" : "s");
    if (groups.mesh) std::printf("mesh: %s\n", groups.describe().c_str());
    if (groups.pipeline.active())
      std::printf("pipeline: %d stages, %s schedule%s, %d micro-batches (ideal bubble %.1f%%); rank 0 holds %s\n",
                  groups.pipeline.layers.stages, pipeline_schedule_name(o.pipeline_schedule),
                  o.virtual_stages > 1 ? strprintf(" of %d chunks per stage", o.virtual_stages).c_str() : "",
                  o.micro_batches,
                  100 * ideal_bubble_fraction(groups.pipeline.layers.stages, o.micro_batches, o.virtual_stages),
                  groups.pipeline.layers.describe().c_str());
    std::printf("batch %d x %d tokens x %d data-parallel rank%s, %d %s = %.0f tokens/step, "
                "%lld steps, lr %g -> %g (%s, warmup %lld), %s compute%s\n",
                o.batch, o.seq_len, data_ranks, data_ranks == 1 ? "" : "s", micro_steps,
                groups.pipeline.active() ? "micro-batch(es)" : "accumulation step(s)", tokens_per_step,
                (long long)o.steps, o.schedule.max_lr, o.schedule.min_lr, o.schedule.kind.c_str(),
                (long long)o.schedule.warmup_steps, kernels::compute_dtype_name(o.compute_dtype),
                o.checkpointing.every ? (", activation checkpointing " + o.checkpointing.describe()).c_str() : "");
    std::fflush(stdout);
  }

  const int64_t requested_steps = o.steps;
  TrainReport report(lead, o.steps, log_every, progress, metrics_file, tokens_per_step);
  report.set_bits_per_byte([&](double loss) { return train->bits_per_byte(loss); },
                           [&](double loss) { return val ? val->bits_per_byte(loss) : 0.0; });
  report.run_info(strprintf("%s on %d rank%s (%s, %s compute)", cfg.describe().c_str(), world_size,
                            world_size == 1 ? "" : "s", strategy_name(pc.strategy),
                            kernels::compute_dtype_name(o.compute_dtype)),
                  dp.describe());
  if (auto hook = fault_hook(rank)) o.before_backward = hook;
  o.stop_requested = &stop_signal();
  Trainer trainer(dp, *train, val.get(), o);
  nlohmann::json flags = nlohmann::json::object();
  for (const auto& [name, value] : job_fields(cfg, o, pc, *train, val.get(), init_from.value_or("")))
    flags[name] = value;
  // Where the tokenizer is, so `distllm convert` can put it into a model directory.
  if (text) {
    flags["tokenizer"] = "byte-level";
  } else if (data && is_directory(*data) && file_exists(join_path(*data, "tokenizer.json"))) {
    flags["tokenizer"] = std::filesystem::absolute(join_path(*data, "tokenizer.json")).string();
  }
  TrainCheckpointer checkpoints(dp, ck, flags, world);
  const int64_t resumed = checkpoints.resume(trainer);
  if (resumed >= 0 && lead)
    std::printf("resumed from %s at step %lld%s\n", ck.dir.c_str(), (long long)resumed,
                checkpoints.resumed_how().empty() ? "" : (" (" + checkpoints.resumed_how() + ")").c_str());
  launch::RankAgent heartbeat(rank);  // progress, liveness and the launcher's lease
  heartbeat.step_done(trainer.steps_done());
  auto log_line = [&](const std::string& line) {
    if (lead && !line.empty()) {
      report.note(line);
    }
  };
  trainer.run(
      [&](const StepStats& s) {
        std::vector<RankFigures> ranks;
        if (!metrics_file.empty()) ranks = gather_rank_figures(dp, s.comm);
        report.step(s, ranks);
        heartbeat.step_done(s.step);
        // A stop request (SIGUSR1/SIGTERM) saves synchronously before leaving.
        log_line(checkpoints.after_step(trainer, s.stop_requested));
      },
      [&](int64_t step, double loss) { report.eval(step, loss, gather_rank_figures(dp, CommTime{})); });
  if (checkpoints.enabled() && !trainer.stopped_by_request())
    log_line(checkpoints.after_step(trainer, /*force=*/true));  // the final state
  log_line(checkpoints.finish());
  // A failed periodic save is reported and training goes on; a failed final save
  // (end of run, stop signal) fails the run, so no scheduler takes it for done.
  if (checkpoints.enabled() && checkpoints.last_save_failed()) {
    if (lead)
      std::fprintf(stderr, "error: the final checkpoint could not be written; the newest complete one is %s\n",
                   checkpoints.newest_saved_step() >= 0
                       ? strprintf("step %lld", (long long)checkpoints.newest_saved_step()).c_str()
                       : "from before this run (if any)");
    return 1;
  }
  if (trainer.stopped_by_request()) {
    if (lead)
      std::printf("stopped by a signal after step %lld%s; resume with --resume auto\n",
                  (long long)trainer.steps_done(),
                  checkpoints.enabled() ? ", checkpoint saved" : " (no --checkpoint-dir: nothing saved)");
    return 0;
  }

  std::string plot_path = plot;
  if (lead && !report.bubble_summary().empty()) std::printf("%s\n", report.bubble_summary().c_str());
  if (plot_path.empty() && out) plot_path = *out + ".loss.svg";
  if (plot_path.empty() && !metrics_file.empty()) plot_path = metrics_file + ".svg";
  if (!plot_path.empty() && lead) std::printf("loss curve: %s\n", report.write_plot(plot_path).c_str());

  if (out) {
    // Every rank takes part in gathering the full parameters; rank 0 writes them.
    std::unique_ptr<Transformer> model = std::make_unique<Transformer>(cfg);
    dp.gather_full(model->params());
    if (lead) {
      // The model directory gets the tokenizer the data was made with, so `generate`
      // and `serve` can use it directly.
      SaveOptions save;
      std::optional<Tokenizer> tok;
      if (text) {
        tok = Tokenizer::byte_level();
      } else if (data && is_directory(*data) && file_exists(join_path(*data, "tokenizer.json"))) {
        tok = Tokenizer::from_file(join_path(*data, "tokenizer.json"));
      }
      if (tok) {
        DL_CHECK(tok->vocab_size() <= cfg.vocab_size, "tokenizer vocabulary %d exceeds the model's %d",
                 tok->vocab_size(), cfg.vocab_size);
        save.extra_files["tokenizer.json"] = tok->to_json();
        if (tok->eos_token_id()) save.eos_token_id = *tok->eos_token_id();
        if (tok->bos_token_id()) save.bos_token_id = *tok->bos_token_id();
      }
      save.overwrite = overwrite;
      save_hf_model(*model, *out, save);
      std::printf("saved %s%s\n", out->c_str(), tok ? " (with tokenizer.json)" : "");
    }
  }
  // Why it ended, what it reached, and where its outputs are.
  const std::string why =
      trainer.stopped_by_time_limit()
          ? strprintf("stopped after step %lld of %lld: the --time-limit of %g s was reached",
                      (long long)trainer.steps_done(), (long long)requested_steps, o.time_limit_seconds)
          : strprintf("finished (--steps %lld)", (long long)requested_steps);
  std::vector<std::string> outputs;
  if (out) outputs.push_back("model: " + *out);
  if (!plot_path.empty()) outputs.push_back("loss curve: " + plot_path);
  if (!metrics_file.empty()) outputs.push_back("metrics: " + metrics_file);
  if (checkpoints.enabled()) outputs.push_back("checkpoints: " + ck.dir);
  std::string listed;
  for (const std::string& o_ : outputs) listed += (listed.empty() ? "" : " | ") + o_;
  report.finish(trainer.steps_done(), why, listed);
  return 0;
}

int run_train(Args& args) { return run_on_world(args, run_train_impl); }

DISTLLM_REGISTER_COMMAND("train", "train a GPT-2 or Llama model (one process, or N ranks under mpirun/srun)",
                         run_train);

}  // namespace
}  // namespace distllm
