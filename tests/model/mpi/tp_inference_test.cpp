// Tensor-parallel inference under mpirun: a model split over 2 or 4 ranks gives the
// logits of the unsplit model (to rounding: the row-parallel all-reduces sum partial
// dot products in another order) and the same greedy generations, for gpt2 (uneven
// MLP and vocabulary splits) and llama with GQA key/value heads split or replicated,
// with f32, bf16 and int8 weights and K/V, for batches mixing prefill chunks and
// decode tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "distllm/base/rng.h"
#include "distllm/comm/tensor_parallel_comm.h"
#include "distllm/comm/world.h"
#include "distllm/model/inference.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/model/transformer.h"

namespace distllm {
namespace {

constexpr int kBlock = 4, kBlocksPerSeq = 16;  // room for 64 positions per sequence

// 12 query heads (gpt2: of 3, width 36, MLP 100; llama: of 4 over `kv` key/value
// heads, width 44, MLP 50), vocabulary 61: the MLP and the vocabulary split unevenly.
ModelConfig tiny(ModelFamily family, int kv = 12) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 61;
  c.max_position = 64;
  c.n_layer = 2;
  c.n_head = 12;
  c.n_kv_head = kv;
  const bool llama = family != ModelFamily::kGpt2;  // and the lineage (qwen2, qwen3)
  c.n_embd = llama ? 44 : 36;
  c.head_dim = llama ? 4 : 0;
  c.intermediate_size = llama ? 50 : 100;
  c.tie_embeddings = !llama;
  c.normalize();
  return c;
}
ModelConfig gpt2_cfg() { return tiny(ModelFamily::kGpt2); }
ModelConfig llama_cfg(int kv) { return tiny(ModelFamily::kLlama, kv); }

// Random weights, scaled up so that logits spread like a trained model's (a fresh
// N(0, 0.02) model's logits are nearly flat, and greedy ties would test nothing).
std::shared_ptr<Transformer> make_model(const ModelConfig& cfg) {
  auto m = std::make_shared<Transformer>(cfg);
  m->init_weights(23);
  CounterRng rng(29);
  for (const ParamTensor& t : m->layout().tensors()) {
    if (t.shape.size() == 2)
      for (int64_t i = 0; i < t.numel; ++i) m->params()[t.offset + i] *= 8.0f;
    // q/k/v biases, q/k norms and sandwich norms off their initial values, so the split uses them.
    const bool qkv_extra = t.role == TensorRole::kQkvBias || t.role == TensorRole::kQNormWeight ||
                           t.role == TensorRole::kKNormWeight || (t.role == TensorRole::kFusedPart && t.shape.size() == 1) ||
                           t.role == TensorRole::kAttnPostNormWeight || t.role == TensorRole::kMlpPostNormWeight;
    if (qkv_extra)
      for (int64_t i = 0; i < t.numel; ++i) m->params()[t.offset + i] += 0.3f * rng.normal();
  }
  return m;
}

std::vector<int32_t> prompt(int seed, int n, int vocab) {
  CounterRng rng(static_cast<uint64_t>(seed));
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return p;
}

// Sequence s uses blocks [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq) of its cache.
std::vector<int32_t> table(int s) {
  std::vector<int32_t> t(kBlocksPerSeq);
  for (int i = 0; i < kBlocksPerSeq; ++i) t[i] = s * kBlocksPerSeq + i;
  return t;
}

struct Run {
  std::vector<float> logits;                 // every step's rows, concatenated
  std::vector<std::vector<int32_t>> tokens;  // per sequence: prompt, then greedy tokens
};

// Three sequences batched together: the prompts prefill in two chunks (the first
// sequence's second chunk shares a step with the others' first), then `steps` greedy
// decode steps of all three in one batch. With `forced`, each step appends the
// token `forced` chose instead of its own (so the logits compared are always of the
// same inputs).
Run generate(InferenceModel& model, int steps, DType kv_dtype, const Run* forced = nullptr) {
  const int V = model.config().vocab_size;
  PagedKvCache cache(model.shard_config(), 3 * kBlocksPerSeq, kBlock, kv_dtype);
  Run run;
  std::vector<std::vector<int32_t>> tables;
  for (int s = 0; s < 3; ++s) {
    run.tokens.push_back(prompt(100 + s, 9 + 4 * s, V));
    tables.push_back(table(s));
  }
  auto chunk = [&](int s, int begin, int end, int logits) {
    return InferenceChunk{run.tokens[s].data() + begin, end - begin, begin, tables[s].data(), kBlocksPerSeq, logits};
  };
  std::vector<float> logits;
  auto step = [&](const std::vector<InferenceChunk>& batch) {
    model.forward(batch, cache, logits);
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
  };
  step({chunk(0, 0, 5, 0)});
  const int n0 = static_cast<int>(run.tokens[0].size()), n1 = static_cast<int>(run.tokens[1].size()),
            n2 = static_cast<int>(run.tokens[2].size());
  step({chunk(0, 5, n0, 2), chunk(1, 0, n1, 1), chunk(2, 0, n2, 3)});
  auto append_greedy = [&](const std::vector<int>& rows) {  // the sampled row of each sequence
    for (int s = 0; s < 3; ++s) {
      const float* row = logits.data() + static_cast<int64_t>(rows[s]) * V;
      const size_t at = run.tokens[s].size();
      run.tokens[s].push_back(forced ? forced->tokens[s][at]
                                     : static_cast<int32_t>(std::max_element(row, row + V) - row));
    }
  };
  append_greedy({1, 2, 5});
  for (int i = 0; i < steps; ++i) {
    std::vector<InferenceChunk> batch;
    for (int s = 0; s < 3; ++s) {
      const int n = static_cast<int>(run.tokens[s].size());
      batch.push_back(chunk(s, n - 1, n, 1));
    }
    step(batch);
    append_greedy({0, 1, 2});
  }
  return run;
}

// The smallest gap between the best and the second-best logit over all rows: greedy
// equality is only meaningful when it is far above the logits' difference.
double min_top2_gap(const std::vector<float>& logits, int V) {
  double gap = 1e30;
  for (size_t r = 0; r + V <= logits.size(); r += V) {
    std::vector<float> row(logits.begin() + r, logits.begin() + r + V);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    gap = std::min(gap, static_cast<double>(row[0] - row[1]));
  }
  return gap;
}

// `tolerance` bounds max |logit difference| / max |logit| (measured values in the
// calls); `same_tokens`: the greedy generations must be equal too. Otherwise the
// shard's run is fed the whole model's tokens, so their logits stay comparable.
void expect_parity(const ModelConfig& cfg, int tp, DType weights, DType kv_dtype, double tolerance,
                   bool same_tokens = true) {
  auto world = comm::world();
  if (tp > world->size()) return;
  SCOPED_TRACE(cfg.describe() + " tp=" + std::to_string(tp) + " weights " + dtype_short_name(weights));
  auto group = world->split(world->rank() < tp ? 0 : -1, world->rank());
  if (!group) return;
  auto model = make_model(cfg);
  InferenceModel whole(model, weights);
  TensorParallelPlan plan(cfg, tp, group->rank());
  comm::GroupTensorParallelComm comm(group);
  InferenceModel shard(model, weights, InferenceTensorParallel{&plan, &comm});
  EXPECT_EQ(shard.shard_config().n_head, cfg.n_head / tp);
  EXPECT_LT(shard.packed_weight_bytes(), whole.packed_weight_bytes());

  const int steps = 12;
  Run ref = generate(whole, steps, kv_dtype);
  Run got = generate(shard, steps, kv_dtype, same_tokens ? nullptr : &ref);
  ASSERT_EQ(got.logits.size(), ref.logits.size());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < ref.logits.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(ref.logits[i])));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got.logits[i]) - ref.logits[i]));
  }
  const double rel = max_diff / max_abs, gap = min_top2_gap(ref.logits, cfg.vocab_size);
  if (group->rank() == 0)
    std::printf(
        "[ measured ] %s tp=%d weights %s, kv %s: max |logit diff| %.3g (%.3g of max |logit| %.3g), min top-2 gap "
        "%.3g\n",
        cfg.family_name().c_str(), tp, dtype_short_name(weights), dtype_short_name(kv_dtype), max_diff, rel, max_abs,
        gap);
  EXPECT_LT(rel, tolerance);
  if (same_tokens) {
    for (int s = 0; s < 3; ++s) EXPECT_EQ(got.tokens[s], ref.tokens[s]) << "sequence " << s;
  }
}

// f32 tolerances: measured at most 3.8e-7 of max |logit| (1.4e-6 absolute), against
// top-2 gaps of at least 5.7e-3, so the greedy tokens cannot flip.
TEST(TensorParallelInference, Gpt2MatchesTheWholeModel) {
  for (int tp : {2, 4}) expect_parity(gpt2_cfg(), tp, DType::kF32, DType::kF32, 1e-5);
}

TEST(TensorParallelInference, LlamaKeyValueHeadsSplit) {
  for (int tp : {2, 4}) expect_parity(llama_cfg(4), tp, DType::kF32, DType::kF32, 1e-5);
}

// qwen2's q/k/v biases split with their heads; qwen3's q/k norms run per head on
// each rank (one key/value head: replicated over the ranks).
TEST(TensorParallelInference, Qwen2AndQwen3MatchTheWholeModel) {
  for (int tp : {2, 4}) {
    expect_parity(tiny(ModelFamily::kQwen2, 4), tp, DType::kF32, DType::kF32, 1e-5);
    expect_parity(tiny(ModelFamily::kQwen3, 1), tp, DType::kF32, DType::kF32, 1e-5);
  }
}

// gemma2: sandwich norms after each row-parallel sum, scaled embeddings, logits capped
// after the gather; gemma3: q/k norms (1 + w) per head on each rank.
TEST(TensorParallelInference, Gemma2AndGemma3MatchTheWholeModel) {
  ModelConfig gemma2 = tiny(ModelFamily::kGemma2, 4);
  gemma2.final_logit_softcap = 5.0f;
  gemma2.normalize();
  for (int tp : {2, 4}) {
    expect_parity(gemma2, tp, DType::kF32, DType::kF32, 1e-5);
    expect_parity(tiny(ModelFamily::kGemma3Text, 1), tp, DType::kF32, DType::kF32, 1e-5);
  }
}

// phi3: each rank's heads out of the fused q|k|v rows, its units out of gate|up.
TEST(TensorParallelInference, Phi3FusedMatricesMatchTheWholeModel) {
  for (int tp : {2, 4}) expect_parity(tiny(ModelFamily::kPhi3, 4), tp, DType::kF32, DType::kF32, 1e-5);
}

TEST(TensorParallelInference, LlamaKeyValueHeadsReplicated) {
  // 2 key/value heads: split at tp 2, each held by 2 ranks at tp 4.
  for (int tp : {2, 4}) expect_parity(llama_cfg(2), tp, DType::kF32, DType::kF32, 1e-5);
}

// int8 scales cover 32 input columns, of the weights and of the activations (q8_0 x
// q8_0): where a shard's columns (here 12 to 25 wide) do not start on a multiple of
// 32, its row-parallel linears quantize weights and inputs in other blocks than the
// whole model's. Logits then differ by quantization noise (measured at most 1.9% of
// max |logit| for gpt2 and 3.3% for llama, whose 44-wide layers are two blocks of
// 32 and 12), too close to the top-2 gaps to ask for equal tokens: the shards are
// fed the whole model's. (gpt2-124M's shards, 384 and 1536 columns, quantize alike.)
TEST(TensorParallelInference, Int8WeightsWithinQuantizationNoise) {
  for (int tp : {2, 4}) {
    expect_parity(gpt2_cfg(), tp, DType::kI8, DType::kF32, 0.03, false);
    expect_parity(llama_cfg(2), tp, DType::kI8, DType::kF32, 0.05, false);
  }
}

// int8 K/V: each (token, key/value head) row is quantized with its own scale, and a
// shard's heads are whole, so the stored values match the whole model's (measured
// 3.4e-7 of max |logit|, as f32).
TEST(TensorParallelInference, Int8KvCache) {
  for (int tp : {2, 4}) {
    expect_parity(gpt2_cfg(), tp, DType::kF32, DType::kI8, 1e-5);
    expect_parity(llama_cfg(2), tp, DType::kF32, DType::kI8, 1e-5);
  }
}

TEST(TensorParallelInference, Bf16WeightsAndCache) {
  // bf16 rounds each weight on its own, so a shard's weights are the whole model's.
  // The linears' inputs are rounded to bf16 too: where the all-reduce's order moves
  // an activation by an ulp of f32 across a bf16 rounding boundary, that element
  // moves by 2^-8 of itself. Measured: equal logits at tp=2, at most 1.0e-3 of max
  // |logit| at tp=4 (gpt2), far below the top-2 gaps; greedy tokens equal.
  for (int tp : {2, 4}) {
    expect_parity(gpt2_cfg(), tp, DType::kBF16, DType::kBF16, 5e-3);
    expect_parity(llama_cfg(2), tp, DType::kBF16, DType::kBF16, 5e-3);
  }
}

}  // namespace
}  // namespace distllm
