// Inference over the paged KV cache: agreement with the training forward, and
// bit-exact batch invariance (alone vs batched, chunked vs one-shot prefill,
// decode vs prefill, any block placement, any thread count).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <numeric>
#include <tuple>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/model/family.h"
#include "distllm/model/inference.h"
#include "distllm/model/train_graph.h"

namespace distllm {
namespace {

ModelConfig config(ModelFamily f) {
  ModelConfig c;
  c.family = f;
  c.n_layer = 2, c.n_head = 6, c.n_kv_head = f == ModelFamily::kGpt2 ? 6 : 2, c.n_embd = 60, c.vocab_size = 211;
  c.max_position = 128, c.tie_embeddings = f == ModelFamily::kGpt2, c.rope_theta = 10000.0;
  if (f == ModelFamily::kQwen3) c.head_dim = 8;  // an attention width (48) other than the model's (60)
  if (f == ModelFamily::kLlama) {                 // Llama 3.1's scaled RoPE
    c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
    c.rope_scaling.factor = 8, c.rope_scaling.original_max_position = 32;
  }
  if (f == ModelFamily::kMistral) c.sliding_window = 7;  // shorter than the prompts: decode reads a window
  if (f == ModelFamily::kPhi3) {  // LongRoPE: positions past 32 turn with the long factors
    c.rope_scaling.kind = RopeScaling::Kind::kLongRope;
    c.rope_scaling.factor = 4, c.rope_scaling.original_max_position = 32;
    c.rope_scaling.short_factor = {1.0, 1.1, 1.3, 1.7, 2.0};
    c.rope_scaling.long_factor = {1.0, 2.5, 4.0, 7.0, 11.0};
  }
  if (f == ModelFamily::kGemma2) {  // sandwich norms (1 + w), GeGLU, scaled embeddings, capped logits
    c.head_dim = 8;
    c.final_logit_softcap = 0.3f;
    c.sliding_window = 9, c.attn_logit_softcap = 1.0f, c.query_pre_attn_scalar = 6.0f;  // local even layers
  }
  if (f == ModelFamily::kGemma3Text) {  // and q/k norms (1 + w); layer 1 local with its own RoPE base
    c.head_dim = 12;
    c.sliding_window = 9, c.sliding_layers = {false, true}, c.rope_local_theta = 500.0;
  }
  c.normalize();
  return c;
}

std::shared_ptr<Transformer> make_model(ModelFamily f) {
  auto m = std::make_shared<Transformer>(config(f));
  m->init_weights(17);
  // Norm weights and biases away from 1 and 0, so that every family's are exercised.
  CounterRng rng(5);
  for (const auto& t : m->layout().tensors())
    if (t.shape.size() == 1)
      for (int64_t i = 0; i < t.numel; ++i) m->params()[t.offset + i] += 0.1f * rng.normal();
  return m;
}

const auto kFamilies = ::testing::Values(ModelFamily::kGpt2, ModelFamily::kLlama, ModelFamily::kQwen2,
                                         ModelFamily::kQwen3, ModelFamily::kPhi3, ModelFamily::kMistral,
                                         ModelFamily::kGemma2, ModelFamily::kGemma3Text);

std::string family_name(ModelFamily f) { return family_def(f).name(); }

std::vector<int32_t> random_tokens(int n, uint64_t seed, int vocab) {
  CounterRng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
  return t;
}

// A sequence with its own (deliberately scattered) blocks.
struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
};

std::vector<float> run_prefill_chunks(InferenceModel& im, PagedKvCache& cache, const Seq& s, int len,
                                      const std::vector<int>& chunk_sizes) {
  std::vector<float> logits;
  int pos = 0;
  for (int n : chunk_sizes) {
    InferenceChunk c{s.tokens.data() + pos, n, pos, s.blocks.data(), static_cast<int>(s.blocks.size()), pos + n == len};
    im.forward({c}, cache, logits);
    pos += n;
  }
  return logits;
}

// (model family, KV cache dtype): every batch-invariance guarantee holds per dtype.
class Inference : public ::testing::TestWithParam<std::tuple<ModelFamily, DType>> {
 protected:
  ModelFamily family() const { return std::get<0>(GetParam()); }
  DType kv() const { return std::get<1>(GetParam()); }
};

TEST_P(Inference, MatchesTrainingForward) {
  auto model = make_model(family());
  InferenceModel im(model);
  const int T = 37;
  auto tokens = random_tokens(T, 1, 211);
  PagedKvCache cache(model->config(), 8, 8, kv());
  std::vector<int32_t> blocks = {5, 2, 7, 0, 3};
  std::vector<float> logits;
  InferenceChunk c{tokens.data(), T, 0, blocks.data(), 5, true};
  im.forward({c}, cache, logits);

  TrainGraph g(model->config(), 1, T);
  std::vector<float> full(static_cast<size_t>(T) * 211);
  std::vector<int32_t> targets(T, 0);
  g.forward(*model, tokens.data(), targets.data(), false, 1.0f, full.data());
  double num = 0, den = 0;
  for (int v = 0; v < 211; ++v) {
    double d = logits[v] - full[(T - 1) * 211 + v];
    num += d * d;
    den += full[(T - 1) * 211 + v] * full[(T - 1) * 211 + v];
  }
  // f32: the same products in another order, measured at most 2.1e-7 relative RMS.
  // bf16 K/V: the rounding of K and V (relative 2^-9 per element) through two
  // layers; measured 3.1e-5 (gpt2), 4.1e-4 (llama with llama3 RoPE), 1.6e-4 (qwen2)
  // and 3.0e-4 (qwen3). int8 K/V (half a step of max|x| / 127 per slice): measured
  // 9.6e-5, 5.4e-4, 6.6e-4 and 9.2e-4. Gemma's post-attention norm rescales the
  // attention output (and with it the rounding) to unit RMS, over windows of 9 keys:
  // measured bf16 1.5e-3 / 2.2e-3 and int8 3.6e-3 / 4.7e-3 (gemma2 / gemma3).
  const double widen = model->config().block().post_norms ? 4.0 : 1.0;
  const double bound = kv() == DType::kF32 ? 1e-6 : widen * (kv() == DType::kBF16 ? 6e-4 : 1.5e-3);
  EXPECT_LT(std::sqrt(num / den), bound) << std::sqrt(num / den);
}

TEST_P(Inference, BitIdenticalWhateverTheBatchChunkingOrThreads) {
  auto model = make_model(family());
  InferenceModel im(model);
  const int L = 40;
  Seq a{random_tokens(L + 5, 2, 211), {9, 1, 4, 12, 6, 15}};
  // Reference: sequence a alone, one-shot prefill of L tokens, then decode 5 tokens.
  PagedKvCache cache(model->config(), 32, 8, kv());
  std::vector<std::vector<float>> reference;
  reference.push_back(run_prefill_chunks(im, cache, a, L, {L}));
  for (int i = 0; i < 5; ++i) {
    std::vector<float> logits;
    InferenceChunk c{a.tokens.data() + L + i, 1, L + i, a.blocks.data(), 6, true};
    im.forward({c}, cache, logits);
    reference.push_back(logits);
  }

  for (int threads : {1, 2, 3}) {
    int saved = num_threads();
    set_num_threads(threads);
    PagedKvCache cache2(model->config(), 32, 8, kv());
    // Chunked prefill interleaved with other sequences (one prefilling, one decoding).
    Seq b{random_tokens(30, 3, 211), {0, 2, 3, 5}};
    Seq d{random_tokens(9, 4, 211), {7, 8}};
    std::vector<float> logits;
    run_prefill_chunks(im, cache2, d, 8, {8});
    InferenceChunk a1{a.tokens.data(), 13, 0, a.blocks.data(), 6, false};
    InferenceChunk b1{b.tokens.data(), 20, 0, b.blocks.data(), 4, true};
    InferenceChunk d1{d.tokens.data() + 8, 1, 8, d.blocks.data(), 2, true};
    im.forward({b1, a1, d1}, cache2, logits);
    InferenceChunk a2{a.tokens.data() + 13, L - 13, 13, a.blocks.data(), 6, true};
    InferenceChunk b2{b.tokens.data() + 20, 10, 20, b.blocks.data(), 4, true};
    im.forward({a2, b2}, cache2, logits);
    ASSERT_EQ(std::memcmp(logits.data(), reference[0].data(), 211 * sizeof(float)), 0)
        << "prefill logits changed with batching/chunking at " << threads << " threads";
    for (int i = 0; i < 5; ++i) {
      // Decode a next to a fresh prefill of another sequence.
      Seq e{random_tokens(11, 10 + i, 211), {20 + i % 4, 24}};
      InferenceChunk e1{e.tokens.data(), 11, 0, e.blocks.data(), 2, true};
      InferenceChunk ad{a.tokens.data() + L + i, 1, L + i, a.blocks.data(), 6, true};
      im.forward({e1, ad}, cache2, logits);
      ASSERT_EQ(std::memcmp(logits.data() + 211, reference[i + 1].data(), 211 * sizeof(float)), 0)
          << "decode step " << i << " at " << threads << " threads";
    }
    set_num_threads(saved);
  }
}

TEST_P(Inference, DecodeEqualsPrefillBitwise) {
  // The K/V a decode step writes and the logits it produces are the same bits a
  // prefill of the same prefix produces (recompute after preemption changes nothing).
  auto model = make_model(family());
  InferenceModel im(model);
  Seq s{random_tokens(20, 5, 211), {3, 1, 2}};
  PagedKvCache c1(model->config(), 4, 8, kv()), c2(model->config(), 4, 8, kv());
  run_prefill_chunks(im, c1, s, 12, {12});
  std::vector<float> step;
  for (int p = 12; p < 20; ++p) {
    InferenceChunk c{s.tokens.data() + p, 1, p, s.blocks.data(), 3, true};
    im.forward({c}, c1, step);
  }
  std::vector<float> once = run_prefill_chunks(im, c2, s, 20, {20});
  EXPECT_EQ(std::memcmp(step.data(), once.data(), 211 * sizeof(float)), 0);
}

TEST_P(Inference, RejectsBadBatches) {
  auto model = make_model(family());
  InferenceModel im(model);
  PagedKvCache cache(model->config(), 4, 8, kv());
  std::vector<int32_t> toks = {1, 2, 300}, blocks = {0, 1};
  std::vector<float> logits;
  auto err = [&](InferenceChunk c) {
    try {
      im.forward({c}, cache, logits);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(err({toks.data(), 3, 0, blocks.data(), 2, true}),
            "batch entry 0: token id 300 outside the vocabulary [0, 211)");
  EXPECT_EQ(err({toks.data(), 2, 15, blocks.data(), 2, true}), "batch entry 0: block table has 2 blocks, positions need 3");
  EXPECT_EQ(err({toks.data(), 2, 127, blocks.data(), 2, true}),
            "batch entry 0: positions [127, 129) exceed the model's context of 128");
  std::vector<int32_t> bad_blocks = {0, 9};
  EXPECT_EQ(err({toks.data(), 2, 0, bad_blocks.data(), 2, true}),
            "batch entry 0: block id 9 outside the cache (4 blocks)");
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndKvDtypes, Inference,
                         ::testing::Combine(kFamilies, ::testing::Values(DType::kF32, DType::kBF16, DType::kI8)),
                         [](const ::testing::TestParamInfo<std::tuple<ModelFamily, DType>>& i) {
                           return family_name(std::get<0>(i.param)) + "_" + dtype_short_name(std::get<1>(i.param));
                         });

// Position 9 of layer 1 (block table {2, 0}: row 1 of block 0) of a cache of the
// llama config (2 kv heads of 10): K/V rows written, and what reads back.
struct RowRoundTrip {
  std::vector<float> k = std::vector<float>(20), v = k, k2 = k, v2 = k;
  explicit RowRoundTrip(PagedKvCache& cache) {
    const std::vector<int32_t> table = {2, 0};
    for (int i = 0; i < 20; ++i) k[i] = 1.0f + i * 1e-3f, v[i] = -0.37f * i;
    cache.write_row(1, table.data(), 9, k.data(), v.data());
    cache.read_row(1, table.data(), 9, k2.data(), v2.data());
  }
};

TEST(PagedKvCache, Bf16HalvesTheBytesAndRoundsToNearestEven) {
  const ModelConfig c = config(ModelFamily::kLlama);  // 2 layers, 2 kv heads of 10
  EXPECT_EQ(PagedKvCache::bytes_per_block(c, 16), 2u * 2 * 16 * 20 * 4);
  EXPECT_EQ(PagedKvCache::bytes_per_block(c, 16, DType::kBF16), 2u * 2 * 16 * 20 * 2);
  EXPECT_THROW(PagedKvCache(c, 4, 8, DType::kI16), Error);
  EXPECT_THROW(PagedKvCache::bytes_per_block(c, 16, DType::kF16), Error);
  PagedKvCache cache(c, 4, 8, DType::kBF16);
  EXPECT_EQ(cache.dtype(), DType::kBF16);
  EXPECT_EQ(cache.block_bytes_per_layer(), 8u * 20 * 2);
  const RowRoundTrip rt(cache);
  const auto& [k, v, k2, v2] = rt;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(k2[i], bf16_to_f32(f32_to_bf16(k[i])));
    EXPECT_EQ(v2[i], bf16_to_f32(f32_to_bf16(v[i])));
  }
  // Position 9 is row 1 of block table[1] = 0 in layer 1's pool.
  const uint16_t* pool = static_cast<const uint16_t*>(static_cast<const PagedKvCache&>(cache).k_layer(1));
  EXPECT_EQ(pool[1 * 20 + 3], f32_to_bf16(k[3]));
}

// int8: n_kv_head slices of head_dim int8 values and one f32 scale each
// (kernels/kv_layout.h): (10 + 4) / 40 of f32's bytes at head_dim 10. A slice's
// largest magnitude is stored exactly (+-127 x scale), the rest within half a step.
TEST(PagedKvCache, Int8StoresValuesAndOneScalePerTokenAndHead) {
  const ModelConfig c = config(ModelFamily::kLlama);  // 2 layers, 2 kv heads of 10
  EXPECT_EQ(PagedKvCache::bytes_per_block(c, 16, DType::kI8), 2u * 2 * 16 * 2 * (10 + 4));
  PagedKvCache cache(c, 4, 8, DType::kI8);
  EXPECT_EQ(cache.row_bytes(), 2u * (10 + 4));
  EXPECT_EQ(cache.block_bytes_per_layer(), 8u * 2 * (10 + 4));
  const RowRoundTrip rt(cache);
  const auto& [k, v, k2, v2] = rt;
  for (int g = 0; g < 2; ++g) {
    float kmax = 0, vmax = 0;
    for (int i = g * 10; i < g * 10 + 10; ++i) {
      kmax = std::max(kmax, std::fabs(k[i]));
      vmax = std::max(vmax, std::fabs(v[i]));
    }
    for (int i = g * 10; i < g * 10 + 10; ++i) {
      EXPECT_LE(std::fabs(k2[i] - k[i]), kmax / 254 * 1.0001f) << i;
      EXPECT_LE(std::fabs(v2[i] - v[i]), vmax / 254 * 1.0001f) << i;
    }
  }
  // Position 9 is row 1 of block table[1] = 0 in layer 1's pool; head 1's slice
  // starts 14 bytes in, and its largest value (k[19]) is +127.
  const int8_t* pool = static_cast<const int8_t*>(static_cast<const PagedKvCache&>(cache).k_layer(1));
  EXPECT_EQ(pool[1 * 28 + 14 + 9], 127);
  EXPECT_EQ(k2[19], k[19]);
}

// Greedy decoding with a bf16 or int8 KV cache against f32: teacher-forced on the
// f32 greedy tokens, every step's logits stay close, and the greedy choices agree.
class InferenceKvVsF32 : public ::testing::TestWithParam<std::tuple<ModelFamily, DType>> {};

TEST_P(InferenceKvVsF32, GreedyDecodeStaysCloseToF32) {
  const ModelFamily family = std::get<0>(GetParam());
  const DType kv = std::get<1>(GetParam());
  auto model = make_model(family);
  InferenceModel im(model);
  const int P = 24, steps = 40;
  std::vector<int32_t> tokens = random_tokens(P, 21, 211);
  std::vector<int32_t> blocks = {3, 9, 0, 14, 6, 11, 1, 8};
  PagedKvCache f32(model->config(), 16, 8), low(model->config(), 16, 8, kv);
  std::vector<float> lf, lb;
  double worst_abs = 0, worst_rel = 0;
  int agree = 0;
  int start = 0;
  for (int step = 0; step < steps; ++step) {
    InferenceChunk c{tokens.data() + start, static_cast<int>(tokens.size()) - start, start, blocks.data(), 8, 1};
    im.forward({c}, f32, lf);
    im.forward({c}, low, lb);
    double num = 0, den = 0;
    for (int v = 0; v < 211; ++v) {
      worst_abs = std::max<double>(worst_abs, std::fabs(lf[v] - lb[v]));
      num += (lf[v] - lb[v]) * (lf[v] - lb[v]);
      den += lf[v] * lf[v];
    }
    worst_rel = std::max(worst_rel, std::sqrt(num / den));
    const int32_t best_f = static_cast<int32_t>(std::max_element(lf.begin(), lf.end()) - lf.begin());
    const int32_t best_b = static_cast<int32_t>(std::max_element(lb.begin(), lb.end()) - lb.begin());
    agree += best_f == best_b;
    start = static_cast<int>(tokens.size());
    tokens.push_back(best_f);
  }
  // Measured over 40 steps (gpt2 / llama with llama3 RoPE / qwen2 / qwen3), bf16: max
  // |logit difference| 1e-5 / 1.7e-4 / 1.9e-4 / 2.4e-4, worst relative RMS 2.9e-5 /
  // 3.7e-4 / 4.4e-4 / 4.7e-4; int8: 4e-5 / 5.5e-4 / 5.1e-4 / 6.8e-4 and 7.5e-5 /
  // 1.2e-3 / 1.1e-3 / 1.5e-3; all 40 greedy choices agreed for each. Mistral's
  // 7-key window averages the rounding over fewer values: bf16 2.9e-4 and 7.3e-4,
  // int8 1.3e-3 and 2.9e-3, all 40 agreeing. Gemma's post-attention norms rescale
  // the rounding to unit RMS (9-key windows): max |dlogit| bf16 1.5e-3 / 2.3e-3, int8
  // 3.4e-3 / 5.1e-3, relative RMS bf16 2.6e-3 / 4.5e-3, int8 6.7e-3 / 1.1e-2 (gemma2 /
  // gemma3), all 40 agreeing.
  const bool bf16 = kv == DType::kBF16;
  const double widen = model->config().block().post_norms ? 6.0 : model->config().has_window() ? 2.0 : 1.0;
  EXPECT_LT(worst_abs, widen * (bf16 ? 5e-4 : 1e-3)) << worst_abs;
  EXPECT_LT(worst_rel, (model->config().block().post_norms ? 1.4 : 1.0) * widen * (bf16 ? 7e-4 : 2e-3)) << worst_rel;
  EXPECT_GE(agree, steps - 1) << agree << " of " << steps;
  std::printf("%s KV vs f32: max |dlogit| %.5f, worst relative RMS %.2e, greedy agreement %d/%d\n",
              dtype_short_name(kv), worst_abs, worst_rel, agree, steps);
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndKvDtypes, InferenceKvVsF32,
                         ::testing::Combine(kFamilies, ::testing::Values(DType::kBF16, DType::kI8)),
                         [](const ::testing::TestParamInfo<std::tuple<ModelFamily, DType>>& i) {
                           return family_name(std::get<0>(i.param)) + "_" + dtype_short_name(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace distllm
