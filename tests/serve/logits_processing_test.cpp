// The sampling API's logit processing (sampler.h, steps 1-3) against values worked
// out by hand on a vocabulary of a few tokens, and min-p's filtered distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/sampler.h"

namespace distllm::serve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> processed(const std::vector<float>& logits, const SamplingParams& p, const SequenceContext& seq) {
  SamplerScratch s;
  std::span<const float> out = process_logits(logits, p, seq, s);
  return {out.begin(), out.end()};
}

TEST(LogitsProcessing, NothingToDoReturnsTheInputRow) {
  std::vector<float> l{1.0f, 2.0f};
  SamplerScratch s;
  EXPECT_EQ(process_logits(l, SamplingParams{}, SequenceContext{}, s).data(), l.data());
}

TEST(LogitsProcessing, LogitBiasAddsToNamedTokens) {
  SamplingParams p;
  p.logit_bias = {{0, 5.0f}, {2, -100.0f}};
  EXPECT_EQ(processed({1.0f, 2.0f, 3.0f}, p, {}), (std::vector<float>{6.0f, 2.0f, -97.0f}));
  p.temperature = 0.0f;
  SamplerScratch s;
  EXPECT_EQ(sample_token(std::vector<float>{1.0f, 2.0f, 3.0f}, p, 0, s).token, 0);
  p.logit_bias = {{7, 1.0f}};
  EXPECT_THROW(processed({1.0f, 2.0f, 3.0f}, p, {}), Error);
}

// HF/vLLM: every token seen in the prompt or the output, once, however often:
// positive logits divided by r, negative ones multiplied by r.
TEST(LogitsProcessing, RepetitionPenaltyCountsPromptAndOutputOnce) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<int32_t> prompt{0, 0, 3};
  std::vector<int32_t> generated{1, 1};
  SequenceContext seq;
  seq.prompt = prompt;
  seq.generated = generated;
  EXPECT_EQ(processed({2.0f, -1.0f, 1.5f, 0.5f, -3.0f}, p, seq), (std::vector<float>{1.0f, -2.0f, 1.5f, 0.25f, -3.0f}));
}

// OpenAI: output tokens only; logit -= count * frequency + (count > 0) * presence.
TEST(LogitsProcessing, FrequencyAndPresencePenaltiesCountOutputOnly) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<int32_t> prompt{3, 3, 3};
  std::vector<int32_t> generated{1, 1, 2};
  SequenceContext seq;
  seq.prompt = prompt;
  seq.generated = generated;
  EXPECT_EQ(processed({0.0f, 0.0f, 0.0f, 0.0f}, p, seq), (std::vector<float>{0.0f, -1.25f, -0.75f, 0.0f}));
  p.frequency_penalty = -1.0f;  // negative values encourage repetition
  p.presence_penalty = 0.0f;
  EXPECT_EQ(processed({0.0f, 0.0f, 0.0f, 0.0f}, p, seq), (std::vector<float>{0.0f, 2.0f, 1.0f, 0.0f}));
}

// vLLM's order: bias, then repetition, then frequency/presence.
TEST(LogitsProcessing, PenaltiesComposeInVllmOrder) {
  SamplingParams p;
  p.logit_bias = {{0, 1.0f}};
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  std::vector<int32_t> generated{0, 0};
  SequenceContext seq;
  seq.generated = generated;
  // token 0: (3 + 1) / 2 - 2 * 1 - 0.5 = -0.5
  EXPECT_EQ(processed({3.0f, 1.0f}, p, seq), (std::vector<float>{-0.5f, 1.0f}));
}

TEST(LogitsProcessing, MaskAndSuppressionSetMinusInfinity) {
  // Tokens 1, 3 and 33 allowed; 3 is suppressed as well.
  std::vector<uint32_t> mask{(1u << 1) | (1u << 3), 1u << (33 - 32)};
  std::vector<float> l(40, 0.5f);
  std::vector<int32_t> suppressed{3};
  SequenceContext seq;
  seq.allowed = mask;
  seq.suppressed = suppressed;
  auto out = processed(l, SamplingParams{}, seq);
  for (size_t i = 0; i < l.size(); ++i) {
    const bool kept = i == 1 || i == 33;
    EXPECT_EQ(out[i], kept ? 0.5f : kNegInf) << i;
  }
  // Sampling only ever picks allowed tokens.
  SamplerScratch s;
  SamplingParams p;
  for (uint64_t step = 0; step < 200; ++step) {
    int32_t t = sample_token(l, p, step, s, seq).token;
    EXPECT_TRUE(t == 1 || t == 33) << t;
  }
  // A mask too short for the vocabulary, or one that allows nothing, is an error.
  std::vector<uint32_t> short_mask{~0u};
  SequenceContext bad;
  bad.allowed = short_mask;
  EXPECT_THROW(processed(l, SamplingParams{}, bad), Error);
  std::vector<uint32_t> none{0u, 0u};
  bad.allowed = none;
  EXPECT_THROW(processed(l, SamplingParams{}, bad), Error);
}

// min_p = 0.25 on probabilities {0.5, 0.3, 0.15, 0.05}: the floor is 0.125, so
// token 3 goes and the rest keep their ratios (0.5 : 0.3 : 0.15 of 0.95).
TEST(LogitsProcessing, MinPDropsTokensBelowAFractionOfTheTop) {
  std::vector<float> l;
  for (double x : {0.5, 0.3, 0.15, 0.05}) l.push_back(static_cast<float>(std::log(x)));
  SamplingParams p;
  p.min_p = 0.25f;
  p.seed = 7;
  SamplerScratch s;
  const int draws = 20000;
  std::vector<int> h(4, 0);
  for (int i = 0; i < draws; ++i) h[static_cast<size_t>(sample_token(l, p, static_cast<uint64_t>(i), s).token)]++;
  EXPECT_EQ(h[3], 0);
  // Chi-square with 2 degrees of freedom; 13.8 is the 0.1% critical value.
  const double expect[3] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95};
  double chi2 = 0.0;
  for (int i = 0; i < 3; ++i) {
    const double e = expect[i] * draws;
    chi2 += (h[static_cast<size_t>(i)] - e) * (h[static_cast<size_t>(i)] - e) / e;
  }
  EXPECT_LT(chi2, 13.8) << h[0] << " " << h[1] << " " << h[2];
}

// Penalties change what greedy decoding picks: a repeated token loses its lead.
TEST(LogitsProcessing, GreedyFollowsPenalizedLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 1.0f;
  std::vector<int32_t> generated{0};
  SequenceContext seq;
  seq.generated = generated;
  SamplerScratch s;
  std::vector<float> l{2.0f, 1.5f};
  EXPECT_EQ(sample_token(l, p, 1, s).token, 0);
  EXPECT_EQ(sample_token(l, p, 1, s, seq).token, 1);
  // Log-probabilities stay those of the raw logits (vLLM's default).
  p.logprobs = 0;
  auto r = sample_token(l, p, 1, s, seq);
  EXPECT_NEAR(r.logprobs.logprob, 1.5 - (2.0 + std::log1p(std::exp(-0.5))), 1e-5);
}

}  // namespace
}  // namespace distllm::serve
