#include "distllm/model/perplexity.h"

#include <cmath>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/model/kv_cache.h"

namespace distllm {

double NllSum::perplexity() const { return tokens > 0 ? std::exp(nats / static_cast<double>(tokens)) : 0.0; }

NllSum sequence_nll(InferenceModel& model, const int32_t* tokens, int n, DType kv_dtype) {
  const ModelConfig& cfg = model.config();
  DL_CHECK(n >= 2 && n <= cfg.max_position, "perplexity: a sequence needs 2 to %d tokens, got %d", cfg.max_position, n);
  constexpr int kBlock = 16;
  const int blocks = (n + kBlock - 1) / kBlock;
  PagedKvCache cache(model.shard_config(), blocks, kBlock, kv_dtype);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int i = 0; i < blocks; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<float> logits;
  InferenceChunk chunk{tokens, n - 1, 0, table.data(), blocks, n - 1};
  model.forward({chunk}, cache, logits);
  const int V = cfg.vocab_size;
  NllSum out;
  for (int i = 0; i + 1 < n; ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * V;
    double mx = row[0];
    for (int v = 1; v < V; ++v) mx = std::max<double>(mx, row[v]);
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    const int32_t target = tokens[i + 1];
    DL_CHECK(target >= 0 && target < V, "perplexity: token %d is outside the vocabulary of %d", target, V);
    out.nats += std::log(z) + mx - static_cast<double>(row[target]);
    ++out.tokens;
  }
  return out;
}

}  // namespace distllm
