// `distllm bench decode`: offline decode speed of the inference engine at several
// batch sizes against the memory-bandwidth roofline: every weight byte is read once
// per decode step, so time/step >= weight bytes / read bandwidth. The roofline
// column is achieved weight GB/s divided by the read bandwidth measured just before.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/membw.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/cli/bench_decode_tp.h"
#include "distllm/cli/bench_stats.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/cli/world_command.h"
#include "distllm/model/hf_cache.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/inference.h"

namespace distllm {
namespace {

// Bytes of weights one decode step reads: every block matrix and bias, norms, the
// output head; the embedding contributes one row per token.
double weight_bytes_per_step(const ModelConfig& cfg) {
  ParamLayout layout(cfg);
  double n = 0;
  for (const auto& t : layout.tensors()) {
    bool lookup_only = t.name == "transformer.wpe.weight" ||
                       (t.name == "model.embed_tokens.weight" && !cfg.tie_embeddings);
    if (!lookup_only) n += static_cast<double>(t.numel);
  }
  return n * 4;
}

// Elements of the matrices InferenceModel packs: the four per layer and the head.
double linear_weights(const ModelConfig& cfg) {
  const double C = cfg.n_embd;
  const double per_layer = C * cfg.qkv_dim() + cfg.attn_dim() * C + C * cfg.mlp_in_dim() + cfg.mlp_act_dim() * C;
  return per_layer * cfg.n_layer + static_cast<double>(cfg.vocab_size) * C;
}

// One forward over an n-token prompt from an empty cache (llama-bench's pp<n>):
// a warm-up, then `rounds` timed passes; prints the median. The logits of the last
// position only, as serving asks for them.
void bench_prefill(InferenceModel& engine, const ModelConfig& cfg, int n, int rounds, int block_size, DType kv_dtype,
                   bool breakdown) {
  DL_CHECK(n <= cfg.max_position, "--prefill %d exceeds the model's context %d", n, cfg.max_position);
  const int blocks = (n + block_size - 1) / block_size;
  PagedKvCache cache(cfg, blocks, block_size, kv_dtype);
  std::vector<int32_t> table(static_cast<size_t>(blocks)), tokens(static_cast<size_t>(n));
  for (int i = 0; i < blocks; ++i) table[i] = i;
  CounterRng rng(5);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(cfg.vocab_size));
  std::vector<float> logits;
  std::vector<double> ms;
  for (int r = 0; r <= rounds; ++r) {
    if (r == 1) {
      Profiler::reset();
      Profiler::set_enabled(breakdown);
    }
    Timer t;
    engine.forward({InferenceChunk{tokens.data(), n, 0, table.data(), blocks, 1}}, cache, logits);
    if (r > 0) ms.push_back(t.millis());  // round 0 warms up
  }
  Profiler::set_enabled(false);
  const double m = median(ms);
  // The linears' multiply-adds (the head for the last position only) and attention's.
  const double head = static_cast<double>(cfg.vocab_size) * cfg.n_embd;
  const double flops = 2.0 * ((linear_weights(cfg) - head) * n + head) +
                       2.0 * cfg.n_layer * cfg.attn_dim() * static_cast<double>(n) * (n + 1);
  std::printf("prefill:    %d tokens in %.1f ms, median of %d (%.1f tokens/s, %.1f GFLOP/s)\n", n, m, rounds,
              n / (m / 1e3), flops / (m / 1e3) / 1e9);
  if (breakdown) {
    for (const auto& e : Profiler::snapshot())
      std::printf("  %-22s %10.3f ms/prefill\n", e.name.c_str(), e.seconds * 1e3 / rounds);
  }
}

int run_bench_decode_impl(Args& args, const comm::ProcessGroupPtr& world) {
  apply_thread_flag(args);
  auto model_dir = args.get_optional("model", "Hugging Face model directory (default: random weights of --preset)");
  std::string batches = args.get_string("batch", "1,4,16", "comma-separated batch sizes");
  int context = static_cast<int>(args.get_int("context", 128, "prompt tokens before decoding"));
  int steps = static_cast<int>(args.get_int("steps", 8, "timed decode steps per round"));
  int rounds = static_cast<int>(args.get_int("rounds", 5, "rounds per batch size (bandwidth measured before each)"));
  int block_size = static_cast<int>(args.get_int("block-size", 16, "KV block size"));
  bool breakdown = args.get_flag("breakdown", "print time per region for the last batch size");
  const int prefill = static_cast<int>(
      args.get_int("prefill", 0, "also time one forward over a prompt of this many tokens (as llama-bench's pp512)"));
  ModelConfig cfg = model_config_from_flags(args, "gpt2-124M", 0);
  const DType dtype = inference_dtype_flag(args);
  const DType kv_dtype = kv_cache_dtype_flag(args);
  const int tp = static_cast<int>(args.get_int(
      "tp", 1, "tensor-parallel size: under `mpirun -np N`, N = --tp; compares the split model with rank 0 alone"));
  if (args.help_or_finish()) return 0;
  check_tp_world(tp, world, "bench decode");

  std::shared_ptr<Transformer> model;
  if (model_dir) {
    model = load_hf_model(resolve_model_dir(*model_dir));
  } else {
    model = std::make_shared<Transformer>(cfg);
    model->init_weights(1);
  }
  cfg = model->config();
  DL_CHECK(steps > 0 && rounds > 0, "--steps and --rounds must be positive");
  DL_CHECK(prefill >= 0, "--prefill must be >= 0, got %d", prefill);
  if (tp > 1) {
    DecodeBenchOptions o{{}, context, steps, rounds, block_size, dtype, kv_dtype};
    for (const std::string& b : split(batches, ',')) o.batches.push_back(static_cast<int>(parse_size(b, "--batch")));
    return bench_decode_tp(std::move(model), o, world);
  }
  InferenceModel engine(model, dtype);
  // The packed linears and head in their dtype, plus the f32 norms and biases.
  double wbytes = weight_bytes_per_step(cfg) - 4.0 * linear_weights(cfg) + static_cast<double>(engine.packed_weight_bytes());
  // Memory bandwidth on shared machines drifts by tens of percent within minutes, so
  // every round measures it right before its decode steps and the roofline ratio is
  // taken per round (median over rounds).
  std::printf("model:      %s\n", cfg.describe().c_str());
  std::printf("weights:    %.1f MB read per decode step (every matrix and the head once, %s)\n", wbytes / 1e6,
              inference_dtype_name(dtype));
  std::printf("kv cache:   %s, %.1f MB read per sequence per decode step at --context %d\n", inference_dtype_name(kv_dtype),
              static_cast<double>(PagedKvCache::bytes_per_block(cfg, 1, kv_dtype)) * context / 1e6, context);
  std::printf("threads:    %d; %d rounds x %d steps per batch size, each round after a bandwidth measurement\n",
              num_threads(), rounds, steps);
  if (prefill > 0) {
    std::printf("\n");
    bench_prefill(engine, cfg, prefill, rounds, block_size, kv_dtype, breakdown);
  }
  std::printf("\n%6s %10s %10s %12s %12s %12s %10s\n", "batch", "ms/step", "tokens/s", "weight GB/s", "read GB/s",
              "triad GB/s", "roofline");

  std::vector<double> all_read_bw;
  for (const std::string& b_text : split(batches, ',')) {
    int B = static_cast<int>(parse_size(b_text, "--batch"));
    DL_CHECK(B > 0 && B <= 1024, "--batch entries must be in [1, 1024]");
    const int total_steps = rounds * steps;
    DL_CHECK(context + total_steps <= cfg.max_position, "--context + rounds x steps exceeds the model's context %d",
             cfg.max_position);
    int blocks_per_seq = (context + total_steps + block_size - 1) / block_size;
    PagedKvCache cache(cfg, B * blocks_per_seq, block_size, kv_dtype);
    std::vector<std::vector<int32_t>> tables(B), tokens(B);
    CounterRng rng(3);
    for (int s = 0; s < B; ++s) {
      for (int i = 0; i < blocks_per_seq; ++i) tables[s].push_back(s * blocks_per_seq + i);
      for (int i = 0; i < context + total_steps; ++i)
        tokens[s].push_back(static_cast<int32_t>(rng.below(cfg.vocab_size)));
    }
    std::vector<float> logits;
    for (int s = 0; s < B; ++s) {
      InferenceChunk c{tokens[s].data(), context, 0, tables[s].data(), blocks_per_seq, true};
      engine.forward({c}, cache, logits);
    }
    std::vector<double> ms, read_bw, triad_bw, ratio;
    Profiler::reset();
    int pos = context;
    for (int round = 0; round < rounds; ++round) {
      MemoryBandwidth bw = measure_memory_bandwidth(256, 2);
      read_bw.push_back(bw.read_gb_per_s);
      triad_bw.push_back(bw.triad_gb_per_s);
      Profiler::set_enabled(breakdown);
      std::vector<double> round_ms;
      for (int step = 0; step < steps; ++step, ++pos) {
        std::vector<InferenceChunk> batch;
        for (int s = 0; s < B; ++s)
          batch.push_back({tokens[s].data() + pos, 1, pos, tables[s].data(), blocks_per_seq, true});
        Timer t;
        engine.forward(batch, cache, logits);
        round_ms.push_back(t.millis());
      }
      Profiler::set_enabled(false);
      double m = median(round_ms);
      ms.insert(ms.end(), round_ms.begin(), round_ms.end());
      ratio.push_back(wbytes / (m / 1e3) / 1e9 / bw.read_gb_per_s);
    }
    all_read_bw.insert(all_read_bw.end(), read_bw.begin(), read_bw.end());
    double m = median(ms);
    std::printf("%6d %10.2f %10.1f %12.1f %12.1f %12.1f %9.1f%%\n", B, m, B / (m / 1e3), wbytes / (m / 1e3) / 1e9,
                median(read_bw), median(triad_bw), 100.0 * median(ratio));
    std::fflush(stdout);
  }
  double bw = median(all_read_bw);
  std::printf("\nroofline: %.2f ms/step at the median read bandwidth %.1f GB/s\n", wbytes / (bw * 1e9) * 1e3, bw);
  Profiler::set_enabled(false);
  if (breakdown) {
    double step_total = 0;
    for (const auto& e : Profiler::snapshot()) step_total += e.seconds;
    std::printf("\n%-22s %10s\n", "region (last batch)", "ms/step");
    for (const auto& e : Profiler::snapshot())
      std::printf("%-22s %10.3f\n", e.name.c_str(), e.seconds * 1e3 / (steps * rounds));
    std::printf("%-22s %10.3f\n", "(sum of regions)", step_total * 1e3 / (steps * rounds));
  }
  return 0;
}

int run_bench_decode(Args& args) { return run_on_world(args, run_bench_decode_impl); }

DISTLLM_REGISTER_COMMAND("bench decode", "decode speed of the inference engine vs the memory-bandwidth roofline",
                         run_bench_decode);

}  // namespace
}  // namespace distllm
