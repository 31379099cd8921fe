// `distllm bench decode`: offline decode speed of the inference engine at several
// batch sizes, and batch-1 against the memory-bandwidth roofline (every weight byte
// is read once per decode step, so time/step >= weight bytes / bandwidth).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/membw.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/inference.h"

namespace distllm {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

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

int run_bench_decode(Args& args) {
  apply_thread_flag(args);
  auto model_dir = args.get_optional("model", "Hugging Face model directory (default: random weights of --preset)");
  std::string batches = args.get_string("batch", "1,4,16", "comma-separated batch sizes");
  int context = static_cast<int>(args.get_int("context", 128, "prompt tokens before decoding"));
  int steps = static_cast<int>(args.get_int("steps", 32, "timed decode steps per batch size"));
  int block_size = static_cast<int>(args.get_int("block-size", 16, "KV block size"));
  ModelConfig cfg = model_config_from_flags(args, "gpt2-124M", 0);
  if (args.help_or_finish()) return 0;

  std::shared_ptr<Transformer> model;
  if (model_dir) {
    model = load_hf_model(*model_dir);
  } else {
    model = std::make_shared<Transformer>(cfg);
    model->init_weights(1);
  }
  cfg = model->config();
  DL_CHECK(context + steps <= cfg.max_position, "--context + --steps exceeds the model's context %d", cfg.max_position);
  InferenceModel engine(model);
  MemoryBandwidth bw = measure_memory_bandwidth();
  double wbytes = weight_bytes_per_step(cfg);
  std::printf("model:      %s\n", cfg.describe().c_str());
  std::printf("memory:     %.1f GB/s (STREAM triad, %d threads)\n", bw.triad_gb_per_s, num_threads());
  std::printf("weights:    %.1f MB read per decode step -> roofline %.2f ms/step\n", wbytes / 1e6,
              wbytes / (bw.triad_gb_per_s * 1e9) * 1e3);
  std::printf("\n%6s %12s %12s %14s %12s\n", "batch", "ms/step", "tokens/s", "weight GB/s", "roofline");

  for (const std::string& b_text : split(batches, ',')) {
    int B = static_cast<int>(parse_size(b_text, "--batch"));
    DL_CHECK(B > 0 && B <= 1024, "--batch entries must be in [1, 1024]");
    int blocks_per_seq = (context + steps + block_size - 1) / block_size;
    PagedKvCache cache(cfg, B * blocks_per_seq, block_size);
    std::vector<std::vector<int32_t>> tables(B), tokens(B);
    CounterRng rng(3);
    for (int s = 0; s < B; ++s) {
      for (int i = 0; i < blocks_per_seq; ++i) tables[s].push_back(s * blocks_per_seq + i);
      for (int i = 0; i < context + steps; ++i) tokens[s].push_back(static_cast<int32_t>(rng.below(cfg.vocab_size)));
    }
    std::vector<float> logits;
    for (int s = 0; s < B; ++s) {
      InferenceChunk c{tokens[s].data(), context, 0, tables[s].data(), blocks_per_seq, true};
      engine.forward({c}, cache, logits);
    }
    std::vector<double> ms;
    for (int step = 0; step < steps; ++step) {
      std::vector<InferenceChunk> batch;
      for (int s = 0; s < B; ++s)
        batch.push_back({tokens[s].data() + context + step, 1, context + step, tables[s].data(), blocks_per_seq, true});
      Timer t;
      engine.forward(batch, cache, logits);
      ms.push_back(t.millis());
    }
    double m = median(ms);
    double gbs = wbytes / (m / 1e3) / 1e9;
    std::printf("%6d %12.2f %12.1f %14.1f %11.1f%%\n", B, m, B / (m / 1e3), gbs, 100.0 * gbs / bw.triad_gb_per_s);
    std::fflush(stdout);
  }
  return 0;
}

DISTLLM_REGISTER_COMMAND("bench decode", "decode speed of the inference engine vs the memory-bandwidth roofline",
                         run_bench_decode);

}  // namespace
}  // namespace distllm
