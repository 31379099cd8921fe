// Speculative decoding (n-gram proposer): the proposer, the accept/reject rule, and
// the engine's output being identical with and without speculation (greedy and
// seeded sampling; stop conditions inside accepted runs; preemption and the prefix
// cache under check_invariants; the deterministic test runner and a real tiny model).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "distllm/base/timer.h"
#include "distllm/serve/engine.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/ngram_proposer.h"
#include "distllm/serve/speculative.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"
#include "serve/test_runner.h"

namespace distllm::serve {
namespace {

using testing::tiny_model;

using testing::Choice;
using testing::collect;

using testing::ByteCodec;
using testing::TestRunner;
using testing::TestRunnerOptions;

// ---------------------------------------------------------------- proposer

TEST(NgramProposer, ContinuesAfterTheLatestLongestMatch) {
  NgramConfig c{1, 3};
  // ... 1 2 3 [9 9] ... 1 2 3 [7 8] ... 1 2 3 -> the latest "1 2 3" is followed by 7 8
  std::vector<int32_t> t = {1, 2, 3, 9, 9, 5, 1, 2, 3, 7, 8, 6, 1, 2, 3};
  EXPECT_EQ(propose_ngram(t, c, 2), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(propose_ngram(t, c, 4), (std::vector<int32_t>{7, 8, 6, 1}));
  EXPECT_TRUE(propose_ngram(t, c, 0).empty());
  // The longest n wins over a later shorter match: "2 3" occurs latest at 7..8, and
  // "1 2 3" there too; "4 2 3" has no earlier occurrence, so n=2 is used.
  std::vector<int32_t> u = {2, 3, 5, 4, 2, 3};
  EXPECT_EQ(propose_ngram(u, c, 1), (std::vector<int32_t>{5}));
  // n below min_n is never tried.
  EXPECT_TRUE(propose_ngram(u, NgramConfig{3, 3}, 2).empty());
  EXPECT_TRUE(propose_ngram(std::vector<int32_t>{1, 2, 3, 4}, c, 2).empty());
  EXPECT_TRUE(propose_ngram(std::vector<int32_t>{5}, c, 2).empty());
}

TEST(NgramProposer, ExtendsARepeatingCycleThroughItsOwnDraft) {
  // Period 2: "a b a b a" -> suffix "b a" latest at 1..2, continuation b a b a ...
  std::vector<int32_t> t = {1, 2, 1, 2, 1};
  EXPECT_EQ(propose_ngram(t, NgramConfig{2, 2}, 5), (std::vector<int32_t>{2, 1, 2, 1, 2}));
  std::vector<int32_t> same = {4, 4, 4};
  EXPECT_EQ(propose_ngram(same, NgramConfig{1, 3}, 3), (std::vector<int32_t>{4, 4, 4}));
}

// ------------------------------------------------------- accept/reject rule

std::vector<double> softmax(const std::vector<float>& l) {
  double m = *std::max_element(l.begin(), l.end()), z = 0;
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) z += (p[i] = std::exp(l[i] - m));
  for (double& x : p) x /= z;
  return p;
}

double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    double e = p[i] * static_cast<double>(n);
    chi += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return chi;
}

// Over many seeds: the first emitted token follows p0 whatever the draft is (the
// draft is accepted with probability p0(d), else the emitted token is p0 without d,
// renormalized), and after an accepted draft the next token follows p1.
TEST(Speculative, VerifyFollowsTheTargetDistribution) {
  const std::vector<float> row0 = {0.3f, 1.2f, -0.5f, 0.9f, 0.0f, 0.6f};
  const std::vector<float> row1 = {-1.0f, 0.2f, 1.5f, 0.1f, 0.7f, -0.3f};
  const std::vector<double> p0 = softmax(row0), p1 = softmax(row1);
  // df = 5: P(chi2 > 20.52) = 0.001. Seeds are fixed, so the test is deterministic.
  const double critical = 20.52;
  for (int32_t d0 : {1, 2}) {  // a likely draft and an unlikely one
    const std::vector<int32_t> draft = {d0, 4};
    std::vector<int64_t> first(6, 0), second(6, 0);
    int64_t accepted = 0;
    const int n = 20000;
    SamplerScratch scratch;
    for (int s = 0; s < n; ++s) {
      SamplingParams params;
      params.seed = 1000 + static_cast<uint64_t>(s);
      const uint64_t generated = 7;  // step counter = generated + row
      VerifyResult v = verify_draft(draft, [&](int row) {
        const auto& l = row == 0 ? row0 : row == 1 ? row1 : row0;
        return sample_token(l, params, generated + static_cast<uint64_t>(row), scratch);
      });
      ASSERT_GE(v.samples.size(), 1u);
      ASSERT_EQ(v.samples.size(), static_cast<size_t>(v.num_accepted) + 1);
      first[static_cast<size_t>(v.samples[0].token)]++;
      if (v.num_accepted >= 1) {
        EXPECT_EQ(v.samples[0].token, d0);
        ++accepted;
        second[static_cast<size_t>(v.samples[1].token)]++;
      } else {
        EXPECT_NE(v.samples[0].token, d0);
      }
      // Same draws as plain decoding of the same rows, token for token.
      EXPECT_EQ(v.samples[0].token, sample_token(row0, params, generated, scratch).token);
    }
    EXPECT_LT(chi_square(first, p0), critical) << "draft " << d0;
    EXPECT_LT(chi_square(second, p1), critical) << "draft " << d0;
    const double rate = static_cast<double>(accepted) / n;
    EXPECT_NEAR(rate, p0[static_cast<size_t>(d0)], 4 * std::sqrt(p0[static_cast<size_t>(d0)] / n));
    // The rejected draws are p0 with d0 removed and renormalized (the residual).
    std::vector<int64_t> rejected = first;
    rejected[static_cast<size_t>(d0)] = 0;
    std::vector<double> residual = p0;
    residual[static_cast<size_t>(d0)] = 0;
    double z = 1 - p0[static_cast<size_t>(d0)];
    for (double& x : residual) x /= z;
    double chi = 0;
    int64_t nr = n - accepted;
    for (size_t i = 0; i < 6; ++i) {
      if (i == static_cast<size_t>(d0)) continue;
      double e = residual[i] * static_cast<double>(nr);
      chi += (static_cast<double>(rejected[i]) - e) * (static_cast<double>(rejected[i]) - e) / e;
    }
    EXPECT_LT(chi, 18.47) << "draft " << d0;  // df = 4, p = 0.001
  }
}

TEST(Speculative, VerifyWithoutDraftSamplesOnce) {
  int calls = 0;
  VerifyResult v = verify_draft({}, [&](int row) {
    EXPECT_EQ(row, 0);
    ++calls;
    SampleResult s; s.token = 42; return s;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(v.num_accepted, 0);
  ASSERT_EQ(v.samples.size(), 1u);
  EXPECT_EQ(v.samples[0].token, 42);
  // All accepted: the bonus row is sampled too.
  std::vector<int32_t> draft = {5, 6};
  v = verify_draft(draft, [&](int row) { SampleResult s; s.token = row == 0 ? 5 : row == 1 ? 6 : 9; return s; });
  EXPECT_EQ(v.num_accepted, 2);
  ASSERT_EQ(v.samples.size(), 3u);
  EXPECT_EQ(v.samples[2].token, 9);
  // First row rejects: one token, the rest is not even sampled.
  calls = 0;
  v = verify_draft(draft, [&](int) { ++calls; SampleResult s; s.token = 1; return s; });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(v.samples.size(), 1u);
}

TEST(Speculative, ConfigIsValidated) {
  SpeculativeConfig c;
  c.method = SpeculativeMethod::kNgram;
  c.validate();
  c.num_speculative_tokens = 0;
  EXPECT_THROW(c.validate(), Error);
  c.num_speculative_tokens = 4;
  c.ngram = {3, 2};
  EXPECT_THROW(c.validate(), Error);
  EXPECT_EQ(parse_speculative_method("ngram"), SpeculativeMethod::kNgram);
  EXPECT_EQ(parse_speculative_method("none"), SpeculativeMethod::kNone);
  EXPECT_THROW(parse_speculative_method("eagle"), Error);
}

// ----------------------------------------------------------------- engine

std::vector<int32_t> bytes(const std::string& s) { return ByteCodec().encode(s); }

GenerationRequest greedy(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = bytes(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

GenerationRequest seeded(const std::string& prompt, int max_tokens, uint64_t seed) {
  GenerationRequest r;
  r.prompt = bytes(prompt);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.95f;
  r.seed = seed;
  r.max_tokens = max_tokens;
  return r;
}

EngineConfig config(int blocks, bool prefix, bool spec, int k = 4) {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = blocks;
  c.enable_prefix_cache = prefix;
  c.scheduler.max_num_batched_tokens = 32;
  c.scheduler.max_num_seqs = 8;
  c.check_invariants = true;
  if (spec) {
    c.speculative.method = SpeculativeMethod::kNgram;
    c.speculative.num_speculative_tokens = k;
    c.speculative.ngram = {1, 3};
  }
  return c;
}

struct RunResult {
  std::vector<Choice> out;
  MetricsSnapshot metrics;
  EngineStats stats;
  int mixed_steps = 0;  // steps holding a speculative chunk and a prefill chunk
};

RunResult run(const EngineConfig& cfg, const TestRunnerOptions& opts, std::vector<GenerationRequest> reqs) {
  ByteCodec codec;
  TestRunner runner(opts);
  runner.record_batches(true);
  ServeMetrics metrics("test");
  Engine engine(runner, codec, cfg, metrics);
  engine.start();
  auto q = std::make_shared<OutputQueue>();
  size_t n = reqs.size();
  engine.submit(std::move(reqs), q);
  RunResult r;
  r.out = collect(*q, n);
  EXPECT_TRUE(engine.wait_idle(10));
  for (const auto& batch : runner.recorded()) {
    bool spec = false, prefill = false;
    for (const SequenceChunk& c : batch) {
      spec |= c.num_logits > 1;
      prefill |= c.num_logits <= 1 && c.tokens.size() > 1;
    }
    r.mixed_steps += spec && prefill;
  }
  r.metrics = metrics.snapshot();
  r.stats = engine.stats();
  EXPECT_EQ(r.stats.active_blocks, 0);
  std::string text = metrics.render();
  if (cfg.speculative.enabled() && r.metrics.spec_drafts > 0) {
    EXPECT_NE(text.find("distllm:spec_decode_num_accepted_tokens_total"), std::string::npos);
    EXPECT_NE(text.find("distllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\""), std::string::npos);
  }
  return r;
}

void expect_same(const std::vector<Choice>& a, const std::vector<Choice>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << what << " request " << i;
    EXPECT_EQ(a[i].finish, b[i].finish) << what << " request " << i;
    EXPECT_EQ(a[i].completion_tokens, b[i].completion_tokens) << what << " request " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << what << " request " << i;
    for (size_t j = 0; j < a[i].logprobs.size(); ++j) {
      EXPECT_EQ(a[i].logprobs[j].token, b[i].logprobs[j].token);
      EXPECT_EQ(a[i].logprobs[j].logprob, b[i].logprobs[j].logprob);
    }
  }
}

TestRunnerOptions copying(int period, int break_permille) {
  TestRunnerOptions o;
  o.copy_period = period;
  o.copy_break_permille = break_permille;
  return o;
}

TEST(SpeculativeEngine, GreedyIdenticalAndMatchesReference) {
  for (int k : {1, 4, 7}) {
    TestRunnerOptions o = copying(9, 100);
    std::vector<GenerationRequest> reqs = {greedy("copy this: abcdefgh", 40)};
    RunResult plain = run(config(64, true, false), o, reqs);
    RunResult spec = run(config(64, true, true, k), o, reqs);
    expect_same(plain.out, spec.out, "k=" + std::to_string(k));
    EXPECT_EQ(spec.out[0].tokens, TestRunner(o).reference_greedy(reqs[0].prompt, 40));
    EXPECT_EQ(plain.metrics.spec_drafts, 0);
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0) << "k=" << k;
    EXPECT_LT(spec.metrics.spec_accepted_tokens, spec.metrics.spec_draft_tokens) << "some drafts must be rejected";
    EXPECT_LT(spec.stats.steps, plain.stats.steps) << "k=" << k;
    EXPECT_EQ(spec.metrics.generation_tokens, 40);
  }
}

TEST(SpeculativeEngine, RandomModelRejectsAlmostEverythingButStaysIdentical) {
  std::vector<GenerationRequest> reqs = {greedy("the the the the the", 30), greedy("abcabcabcabc", 30)};
  RunResult plain = run(config(64, true, false), {}, reqs);
  RunResult spec = run(config(64, true, true), {}, reqs);
  expect_same(plain.out, spec.out, "random");
  EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
}

TEST(SpeculativeEngine, SeededSamplingIdentical) {
  TestRunnerOptions o = copying(7, 50);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = seeded("sample " + std::to_string(i) + " repeat repeat", 30, 77 + static_cast<uint64_t>(i));
    r.sampling.logprobs = 2;
    if (i % 2) r.sampling.repetition_penalty = 1.3f;  // history includes accepted drafts
    if (i == 3) r.sampling.frequency_penalty = 0.5f;
    reqs.push_back(r);
  }
  RunResult plain = run(config(64, true, false), o, reqs);
  RunResult spec = run(config(64, true, true), o, reqs);
  expect_same(plain.out, spec.out, "seeded");
  EXPECT_GT(spec.metrics.spec_accepted_tokens, 0);
}

// Stop token ids, EOS, stop strings and max_tokens that fall inside an accepted run:
// the request ends at exactly the token it ends at without speculation.
TEST(SpeculativeEngine, StopConditionsInsideAcceptedRuns) {
  TestRunnerOptions o = copying(6, 0);  // every draft accepted after the first cycle
  const std::string prompt = "xyzuvw xyzuvw";
  RunResult full = run(config(64, false, false), o, {greedy(prompt, 40)});
  const std::vector<int32_t>& toks = full.out[0].tokens;
  ASSERT_EQ(toks.size(), 40u);
  std::vector<GenerationRequest> reqs;
  {
    GenerationRequest r = greedy(prompt, 40);  // stop id at the 14th token
    r.stop_token_ids = {toks[13]};
    reqs.push_back(r);
  }
  {
    GenerationRequest r = greedy(prompt, 40);  // a stop string ending mid-run
    r.stop = {full.out[0].text.substr(16, 3)};
    reqs.push_back(r);
  }
  for (int m : {1, 2, 5, 9, 13}) reqs.push_back(greedy(prompt, m));  // max_tokens mid-run
  {
    GenerationRequest r = greedy(prompt, 40);  // a stop string never hit
    r.stop = {"\x01\x02"};
    reqs.push_back(r);
  }
  for (bool prefix : {false, true}) {
    RunResult plain = run(config(64, prefix, false), o, reqs);
    RunResult spec = run(config(64, prefix, true, 5), o, reqs);
    expect_same(plain.out, spec.out, "stops");
    EXPECT_EQ(spec.out[0].finish, FinishReason::kStop);
    EXPECT_EQ(spec.out[1].finish, FinishReason::kStop);
    EXPECT_EQ(spec.out[4].tokens.size(), 5u);
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0);
    EXPECT_EQ(spec.metrics.spec_accepted_tokens, spec.metrics.spec_draft_tokens);
  }
  // EOS inside a run: a model that often prefers EOS.
  TestRunnerOptions e = copying(5, 0);
  e.eos_permille = 40;
  std::vector<GenerationRequest> eos_reqs;
  for (int i = 0; i < 8; ++i) eos_reqs.push_back(greedy("eos " + std::to_string(i) + " abcab abcab", 60));
  RunResult plain = run(config(64, true, false), e, eos_reqs);
  RunResult spec = run(config(64, true, true), e, eos_reqs);
  expect_same(plain.out, spec.out, "eos");
  int stopped = 0;
  for (const Choice& c : spec.out) stopped += c.finish == FinishReason::kStop;
  EXPECT_GT(stopped, 0);
}

// min_tokens (EOS and stop ids suppressed, stop strings disarmed until then) and
// include_stop_str_in_output, with the boundary falling inside accepted runs.
TEST(SpeculativeEngine, MinTokensAndIncludeStopIdentical) {
  TestRunnerOptions o = copying(5, 0);
  o.eos_permille = 60;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = greedy("min " + std::to_string(i) + " abcab abcab", 50);
    r.min_tokens = 3 + 4 * i;
    if (i % 2) r.stop = {"ab"};
    if (i % 3 == 0) r.include_stop_str_in_output = true;
    if (i == 5) r.stop_token_ids = {'b'};
    reqs.push_back(r);
  }
  for (bool seeded_run : {false, true}) {
    if (seeded_run) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].sampling.temperature = 0.8f;
        reqs[i].seed = 900 + i;
      }
    }
    RunResult plain = run(config(64, true, false), o, reqs);
    RunResult spec = run(config(64, true, true), o, reqs);
    expect_same(plain.out, spec.out, seeded_run ? "min_tokens seeded" : "min_tokens greedy");
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_GE(spec.out[i].completion_tokens, reqs[i].min_tokens) << i;
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0);
  }
}

// Many requests, mixed prefills and speculative decodes in one step, shared
// prefixes, a cache too small for all (preemption), check_invariants every step.
TEST(SpeculativeEngine, MixedBatchUnderPreemptionAndPrefixCache) {
  TestRunnerOptions o = copying(8, 150);
  for (bool prefix : {true, false}) {
    std::vector<GenerationRequest> reqs;
    std::vector<std::vector<int32_t>> expected;
    for (int i = 0; i < 16; ++i) {
      std::string p = std::string(i % 3 == 0 ? "shared system prompt: be brief. " : "other ") + std::to_string(i);
      int n = 10 + (i * 7) % 25;
      reqs.push_back(i % 4 == 1 ? seeded(p, n, static_cast<uint64_t>(i)) : greedy(p, n));
      if (i % 4 != 1) expected.push_back(TestRunner(o).reference_greedy(reqs.back().prompt, n));
      else expected.emplace_back();
    }
    RunResult plain = run(config(40, prefix, false), o, reqs);
    RunResult spec = run(config(40, prefix, true), o, reqs);
    expect_same(plain.out, spec.out, prefix ? "prefix on" : "prefix off");
    for (size_t i = 0; i < reqs.size(); ++i)
      if (!expected[i].empty()) {
        EXPECT_EQ(spec.out[i].tokens, expected[i]) << i;
      }
    EXPECT_GT(spec.stats.preemptions, 0);
    EXPECT_GT(spec.stats.max_batch_seqs, 1);
    EXPECT_GT(spec.mixed_steps, 0);
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0);
    if (prefix) {
      EXPECT_GT(spec.metrics.prefix_hit_tokens, 0);
    }
  }
}

TEST(SpeculativeEngine, DisabledAboveABatchSize) {
  TestRunnerOptions o = copying(6, 0);
  std::vector<GenerationRequest> reqs = {greedy("abcdef abcdef", 30), greedy("ghijkl ghijkl", 30)};
  EngineConfig cfg = config(64, true, true);
  cfg.speculative.disable_by_batch_size = 1;  // two running: no drafts
  RunResult two = run(cfg, o, reqs);
  EXPECT_EQ(two.metrics.spec_drafts, 0);
  RunResult plain = run(config(64, true, false), o, reqs);
  expect_same(plain.out, two.out, "disabled");
  RunResult one = run(cfg, o, {reqs[0]});
  EXPECT_GT(one.metrics.spec_accepted_tokens, 0);
  cfg.speculative.disable_by_batch_size = -1;
  EXPECT_THROW(cfg.speculative.validate(), Error);
}

// A later request reuses prefix blocks that include tokens generated with
// speculation: only accepted tokens were ever registered, so its output is right.
TEST(SpeculativeEngine, PrefixCacheHoldsOnlyAcceptedTokens) {
  TestRunnerOptions o = copying(5, 300);
  ByteCodec codec;
  TestRunner runner(o);
  ServeMetrics metrics("test");
  Engine engine(runner, codec, config(64, true, true), metrics);
  engine.start();
  auto q = std::make_shared<OutputQueue>();
  const std::string prompt = "prefix test 12345";
  engine.submit({greedy(prompt, 30)}, q);
  Choice first = collect(*q, 1)[0];
  ASSERT_EQ(first.tokens.size(), 30u);
  // Continue from prompt + generated: its blocks (generated ones included) hit.
  std::vector<int32_t> cont = bytes(prompt);
  cont.insert(cont.end(), first.tokens.begin(), first.tokens.end() - 1);
  GenerationRequest r;
  r.prompt = cont;
  r.sampling.temperature = 0.0f;
  r.max_tokens = 12;
  engine.submit({r}, q);
  Choice second = collect(*q, 1)[0];
  EXPECT_GT(second.cached_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(second.tokens, runner.reference_greedy(cont, 12));
  EXPECT_EQ(second.tokens[0], first.tokens.back());
  EXPECT_TRUE(engine.wait_idle(5));
}

// The real inference model (tiny random weights): batch-invariant logits for any
// number of rows, so greedy output is identical with speculation.
TEST(SpeculativeEngine, RealModelGreedyAndSeededIdentical) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    auto model = tiny_model(family);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 6; ++i) {
      std::string p = "tiny " + std::to_string(i) + " ab ab ab ab";
      reqs.push_back(i % 2 ? seeded(p, 40, static_cast<uint64_t>(i)) : greedy(p, 40));
    }
    auto go = [&](bool spec) {
      ByteCodec codec;
      InferenceRunner runner(model);
      ServeMetrics metrics("tiny");
      EngineConfig cfg = config(36, true, spec);  // 144 tokens for 6 x ~55: preemption
      cfg.scheduler.max_num_seqs = 6;
      Engine engine(runner, codec, cfg, metrics);
      engine.start();
      auto q = std::make_shared<OutputQueue>();
      engine.submit(reqs, q);
      RunResult r;
      r.out = collect(*q, reqs.size());
      EXPECT_TRUE(engine.wait_idle(10));
      r.metrics = metrics.snapshot();
      r.stats = engine.stats();
      return r;
    };
    RunResult plain = go(false), spec = go(true);
    expect_same(plain.out, spec.out, family == ModelFamily::kGpt2 ? "gpt2" : "llama");
    EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
    std::printf("[ real model ] drafts %lld, draft tokens %lld, accepted %lld, steps %lld vs %lld\n",
                static_cast<long long>(spec.metrics.spec_drafts), static_cast<long long>(spec.metrics.spec_draft_tokens),
                static_cast<long long>(spec.metrics.spec_accepted_tokens), static_cast<long long>(spec.stats.steps),
                static_cast<long long>(plain.stats.steps));
  }
}

// The runner's rows for the last N positions equal the logits of running the same
// positions one at a time (the batch-invariance guarantee, for N > 1).
TEST(SpeculativeEngine, RunnerLastNLogitsEqualOneAtATime) {
  auto model = tiny_model(ModelFamily::kLlama);
  InferenceModel a(model), b(model);
  PagedKvCache ca(a.config(), 16, 4), cb(b.config(), 16, 4);
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<int32_t> toks = {5, 9, 17, 3, 99, 250, 7, 7, 7, 12, 40};
  std::vector<float> la, lb, one;
  a.forward({InferenceChunk{toks.data(), 11, 0, table.data(), 16, 5}}, ca, la);
  ASSERT_EQ(la.size(), 5u * 300);
  // Rows of `la` are positions 6..10. Position 6 via a 7-token prefill, then one by one.
  b.forward({InferenceChunk{toks.data(), 7, 0, table.data(), 16, 1}}, cb, lb);
  for (int p = 6; p < 11; ++p) {
    one = lb;
    if (p > 6) b.forward({InferenceChunk{toks.data() + p, 1, p, table.data(), 16, 1}}, cb, one);
    for (size_t v = 0; v < 300; ++v) ASSERT_EQ(la[static_cast<size_t>(p - 6) * 300 + v], one[v]) << p;
  }
}

}  // namespace
}  // namespace distllm::serve
