#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/serve/sampler.h"

namespace distllm::serve {
namespace {

std::vector<float> logits_of_probs(std::vector<double> p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

std::vector<int> histogram(const std::vector<float>& logits, SamplingParams p, int draws) {
  SamplerScratch scratch;
  std::vector<int> h(logits.size(), 0);
  for (int i = 0; i < draws; ++i) h[static_cast<size_t>(sample_token(logits, p, static_cast<uint64_t>(i), scratch).token)]++;
  return h;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplerScratch s;
  SamplingParams p;
  p.temperature = 0.0f;
  std::vector<float> l{1.0f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(sample_token(l, p, 0, s).token, 1);
  EXPECT_EQ(sample_token(l, p, 99, s).token, 1);
}

TEST(Sampler, SameSeedAndStepSameToken) {
  SamplerScratch s;
  CounterRng rng(3);
  std::vector<float> l(1000);
  for (float& x : l) x = rng.normal();
  SamplingParams p;
  p.seed = 42;
  std::vector<int32_t> a, b, c;
  for (uint64_t step = 0; step < 50; ++step) {
    a.push_back(sample_token(l, p, step, s).token);
    b.push_back(sample_token(l, p, step, s).token);
  }
  p.seed_stream = 1;
  for (uint64_t step = 0; step < 50; ++step) c.push_back(sample_token(l, p, step, s).token);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::sort(a.begin(), a.end());
  EXPECT_GT(std::unique(a.begin(), a.end()) - a.begin(), 20);  // it really samples
}

TEST(Sampler, MatchesTheDistribution) {
  auto l = logits_of_probs({0.5, 0.3, 0.2});
  SamplingParams p;
  p.seed = 7;
  auto h = histogram(l, p, 20000);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, 0.2, 0.02);
  // Temperature 2 flattens: p ∝ sqrt(p).
  p.temperature = 2.0f;
  h = histogram(l, p, 20000);
  double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  EXPECT_NEAR(h[0] / 20000.0, std::sqrt(0.5) / z, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, std::sqrt(0.2) / z, 0.02);
}

TEST(Sampler, TopKAndTopPFilter) {
  auto l = logits_of_probs({0.2, 0.5, 0.3});
  SamplingParams p;
  p.top_k = 1;
  auto h = histogram(l, p, 500);
  EXPECT_EQ(h[1], 500);
  p.top_k = 2;
  h = histogram(l, p, 5000);
  EXPECT_EQ(h[0], 0);
  EXPECT_NEAR(h[1] / 5000.0, 0.5 / 0.8, 0.03);
  p.top_k = 0;
  p.top_p = 0.6f;  // 0.5 < 0.6, 0.5 + 0.3 >= 0.6: keeps {1, 2}
  h = histogram(l, p, 5000);
  EXPECT_EQ(h[0], 0);
  EXPECT_GT(h[2], 1000);
  p.top_p = 0.5f;
  h = histogram(l, p, 500);
  EXPECT_EQ(h[1], 500);
}

// The lazily sorted top-p path must pick exactly what a full sort would.
TEST(Sampler, TopPOnLargeVocabMatchesFullSortReference) {
  CounterRng rng(5);
  SamplerScratch s;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> l(5000);
    float scale = trial % 2 ? 0.1f : 4.0f;  // near-uniform and peaked
    for (float& x : l) x = scale * rng.normal();
    SamplingParams p;
    p.seed = static_cast<uint64_t>(trial);
    p.top_p = 0.9f;
    p.temperature = 0.8f;
    for (uint64_t step = 0; step < 5; ++step) {
      // Reference: sort everything.
      std::vector<float> probs(l.size());
      float mx = *std::max_element(l.begin(), l.end());
      double total = 0;
      for (size_t i = 0; i < l.size(); ++i) total += probs[i] = std::exp((l[i] - mx) * (1.0f / p.temperature));
      std::vector<int32_t> order(l.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
      double cum = 0;
      size_t kept = 0;
      while (kept < order.size()) {
        cum += probs[order[kept++]];
        if (cum >= 0.9 * total) break;
      }
      double kept_total = 0;
      for (size_t i = 0; i < kept; ++i) kept_total += probs[order[i]];
      double target = CounterRng(p.seed, 0, step).uniform_double() * kept_total;
      int32_t expected = order[kept - 1];
      cum = 0;
      for (size_t i = 0; i < kept; ++i) {
        cum += probs[order[i]];
        if (cum > target) {
          expected = order[i];
          break;
        }
      }
      EXPECT_EQ(sample_token(l, p, step, s).token, expected) << "trial " << trial << " step " << step;
    }
  }
}

TEST(Sampler, LogprobsAreRawLogSoftmaxWithSortedAlternatives) {
  auto l = logits_of_probs({0.1, 0.6, 0.3});
  SamplerScratch s;
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 2;
  auto r = sample_token(l, p, 0, s);
  ASSERT_TRUE(r.has_logprobs);
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprobs.logprob, std::log(0.6), 1e-5);
  ASSERT_EQ(r.logprobs.top.size(), 2u);
  EXPECT_EQ(r.logprobs.top[0].first, 1);
  EXPECT_EQ(r.logprobs.top[1].first, 2);
  EXPECT_NEAR(r.logprobs.top[1].second, std::log(0.3), 1e-5);
  p.logprobs = -1;
  EXPECT_FALSE(sample_token(l, p, 0, s).has_logprobs);
  p.logprobs = 10;  // more than the vocabulary
  EXPECT_EQ(sample_token(l, p, 0, s).logprobs.top.size(), 3u);
}

TEST(Sampler, RejectsNaNLogits) {
  SamplerScratch s;
  std::vector<float> l{0.0f, std::nanf(""), 1.0f};
  try {
    sample_token(l, SamplingParams{}, 0, s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "model produced NaN logits");
  }
  std::vector<float> inf(3, -INFINITY);
  EXPECT_THROW(sample_token(inf, SamplingParams{}, 0, s), Error);
}

}  // namespace
}  // namespace distllm::serve
