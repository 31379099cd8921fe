// The engine over the real inference model (tiny random GPT-2 and Llama models):
// greedy outputs under continuous batching, chunked prefill, prefix sharing and
// preemption equal a plain one-sequence-at-a-time decode.
#include <gtest/gtest.h>

#include "distllm/serve/engine.h"
#include "distllm/serve/inference_runner.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"

namespace distllm::serve {
namespace {

using testing::tiny_model;

// One sequence, contiguous blocks, prefill then greedy decode.
std::vector<int32_t> direct_greedy(const std::shared_ptr<Transformer>& model, std::vector<int32_t> tokens, int n,
                                   DType kv_dtype = DType::kF32) {
  InferenceModel im(model);
  const int block = 8;
  PagedKvCache cache(im.config(), 32, block, kv_dtype);
  std::vector<int32_t> table(32);
  for (int i = 0; i < 32; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<float> logits;
  std::vector<int32_t> out;
  int start = 0;
  for (int step = 0; step < n; ++step) {
    InferenceChunk c{tokens.data() + start, static_cast<int>(tokens.size()) - start, start, table.data(), 32, true};
    im.forward({c}, cache, logits);
    int32_t best = 0;
    for (int32_t t = 1; t < im.config().vocab_size; ++t)
      if (logits[static_cast<size_t>(t)] > logits[static_cast<size_t>(best)]) best = t;
    out.push_back(best);
    start = static_cast<int>(tokens.size());
    tokens.push_back(best);
  }
  return out;
}

// 12 requests, half of them behind a shared prefix, 10 to 21 tokens each; or
// (`long_generations`) 6 short prompts that generate 60 tokens each: 16 blocks of 4
// per sequence, 96 for all, in a pool of 24. `preemptions` (if given) gets the
// engine's preemption count.
void check_family(ModelFamily family, DType kv_dtype = DType::kF32, int64_t* preemptions = nullptr,
                  bool long_generations = false) {
  auto model = tiny_model(family);
  testing::ByteCodec codec;
  InferenceRunner runner(model, DType::kF32, kv_dtype);
  ServeMetrics metrics("tiny");
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 24;  // 96 tokens for 6 running requests of up to 68: preemption
  cfg.scheduler.max_num_seqs = 6;
  cfg.scheduler.max_num_batched_tokens = 24;
  cfg.check_invariants = true;
  Engine engine(runner, codec, cfg, metrics);
  engine.start();
  auto q = std::make_shared<OutputQueue>();
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < (long_generations ? 6 : 12); ++i) {
    GenerationRequest r;
    std::string prompt = (i % 2 ? "A shared system prompt for everyone. " : "") + std::string("question ") + std::to_string(i);
    if (long_generations) prompt = "q" + std::to_string(i);
    r.prompt = codec.encode(prompt);
    r.max_tokens = long_generations ? 60 : 10 + i;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  auto ids = engine.submit(reqs, q);
  std::vector<std::vector<int32_t>> got(reqs.size());
  size_t done = 0;
  std::vector<OutputDelta> ds;
  while (done < reqs.size()) {
    ds.clear();
    ASSERT_TRUE(q->pop_all(ds, 30.0)) << "timed out";
    for (auto& d : ds) {
      auto& g = got[static_cast<size_t>(d.index)];
      g.insert(g.end(), d.token_ids.begin(), d.token_ids.end());
      if (d.finish != FinishReason::kNone) {
        EXPECT_EQ(d.finish, FinishReason::kLength) << d.error;
        ++done;
      }
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(got[i], direct_greedy(model, reqs[i].prompt, reqs[i].max_tokens, kv_dtype))
        << model->config().family_name() << " request " << i << ", KV cache " << dtype_short_name(kv_dtype);
  EXPECT_TRUE(engine.wait_idle(5));
  EngineStats s = engine.stats();
  EXPECT_GT(s.max_batch_seqs, 1);
  if (!long_generations) {
    EXPECT_GT(metrics.snapshot().prefix_hit_tokens, 0);
  }
  EXPECT_EQ(s.active_blocks, 0);
  if (preemptions) *preemptions = s.preemptions;
}

int64_t preemptions_of(ModelFamily family, DType kv_dtype = DType::kF32, bool long_generations = false) {
  int64_t n = -1;
  check_family(family, kv_dtype, &n, long_generations);
  return n;
}

TEST(InferenceRunner, Gpt2GreedyUnderBatchingEqualsDirectDecode) { EXPECT_GT(preemptions_of(ModelFamily::kGpt2), 0); }
TEST(InferenceRunner, LlamaGreedyUnderBatchingEqualsDirectDecode) { EXPECT_GT(preemptions_of(ModelFamily::kLlama), 0); }
// A 6-token sliding window: each sequence gives back the blocks behind its window
// as it goes (the direct decode keeps them all), greedy tokens unchanged under
// batching, chunked prefill, prefix sharing and preemption. Six 60-token
// generations need 96 blocks of 4 kept whole, and preempt each other in a pool of
// 24 without a window (Llama); with it each holds at most 3 blocks: none is preempted.
TEST(InferenceRunner, MistralWindowFreesBlocksAndGreedyEqualsDirectDecode) {
  check_family(ModelFamily::kMistral);
  check_family(ModelFamily::kMistral, DType::kBF16);
  EXPECT_GT(preemptions_of(ModelFamily::kLlama, DType::kF32, /*long_generations=*/true), 0);
  EXPECT_EQ(preemptions_of(ModelFamily::kMistral, DType::kF32, /*long_generations=*/true), 0);
  EXPECT_EQ(preemptions_of(ModelFamily::kMistral, DType::kI8, /*long_generations=*/true), 0);
}
// A bf16 KV cache keeps batch invariance: batched, chunked, preempted = direct.
TEST(InferenceRunner, Gpt2Bf16KvGreedyUnderBatchingEqualsDirectDecode) {
  EXPECT_GT(preemptions_of(ModelFamily::kGpt2, DType::kBF16), 0);
}
TEST(InferenceRunner, LlamaBf16KvGreedyUnderBatchingEqualsDirectDecode) {
  EXPECT_GT(preemptions_of(ModelFamily::kLlama, DType::kBF16), 0);
}

// So does an int8 one (per-token scales: nothing depends on the batch).
TEST(InferenceRunner, Gpt2Int8KvGreedyUnderBatchingEqualsDirectDecode) {
  EXPECT_GT(preemptions_of(ModelFamily::kGpt2, DType::kI8), 0);
}
TEST(InferenceRunner, LlamaInt8KvGreedyUnderBatchingEqualsDirectDecode) {
  EXPECT_GT(preemptions_of(ModelFamily::kLlama, DType::kI8), 0);
}

// Blocks of 16 tokens an engine over `runner` (not yet allocated) gets from 0.001 GiB
// of --kv-cache-memory: as many as that many bytes hold.
int engine_blocks(InferenceRunner& runner) {
  testing::ByteCodec codec;
  ServeMetrics metrics("m");
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.kv_cache_memory_gib = 0.001;
  Engine engine(runner, codec, cfg, metrics);
  EXPECT_EQ(engine.num_blocks(),
            static_cast<int>(0.001 * 1073741824.0 / static_cast<double>(runner.kv_bytes_per_block(16))));
  return engine.num_blocks();
}

TEST(InferenceRunner, Bf16KvHalvesTheBlockBytesAndDoublesTheBlocks) {
  auto model = tiny_model(ModelFamily::kLlama);
  InferenceRunner f32(model), bf16(model, DType::kF32, DType::kBF16);
  KvGeometry g = bf16.kv_geometry();
  EXPECT_EQ(g.dtype, DType::kBF16);
  EXPECT_EQ(g.dtype_bytes, 2);
  EXPECT_EQ(f32.kv_geometry().dtype_bytes, 4);
  EXPECT_EQ(bf16.kv_bytes_per_block(16), 16 * g.bytes_per_token());
  EXPECT_EQ(2 * bf16.kv_bytes_per_block(16), f32.kv_bytes_per_block(16));
  EXPECT_THROW(InferenceRunner(model, DType::kF32, DType::kF16), Error);
  // The same --kv-cache-memory holds twice the blocks.
  EXPECT_EQ(engine_blocks(bf16), 2 * engine_blocks(f32));
}

// int8: head_dim int8 values plus one f32 scale per (token, kv head), so
// (8 + 4) / 32 of f32's bytes at this model's head_dim 8 (68 / 256 at gpt2's 64).
TEST(InferenceRunner, Int8KvStoresScalesWithTheValuesAndHoldsMoreBlocks) {
  auto model = tiny_model(ModelFamily::kLlama);
  InferenceRunner f32(model), i8(model, DType::kF32, DType::kI8);
  KvGeometry g = i8.kv_geometry();
  EXPECT_EQ(g.dtype, DType::kI8);
  EXPECT_EQ(g.dtype_bytes, 1);
  EXPECT_EQ(g.bytes_per_token(), 2u * g.num_layers * g.num_kv_heads * (g.head_dim + 4));
  EXPECT_EQ(i8.kv_bytes_per_block(16), 16 * g.bytes_per_token());
  EXPECT_EQ(32 * i8.kv_bytes_per_block(16), 12 * f32.kv_bytes_per_block(16));
  EXPECT_GT(engine_blocks(i8), 2 * engine_blocks(f32));
}

TEST(InferenceRunner, ReportsGeometry) {
  auto model = tiny_model(ModelFamily::kLlama);
  InferenceRunner r(model);
  KvGeometry g = r.kv_geometry();
  EXPECT_EQ(g.num_layers, 2);
  EXPECT_EQ(g.num_kv_heads, 2);
  EXPECT_EQ(g.head_dim, 8);
  EXPECT_EQ(r.kv_bytes_per_block(16), 16 * g.bytes_per_token());
  EXPECT_EQ(r.max_context(), 128);
}

}  // namespace
}  // namespace distllm::serve
