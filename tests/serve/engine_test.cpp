#include <gtest/gtest.h>

#include <thread>

#include "distllm/base/timer.h"
#include "distllm/serve/engine.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"
#include "serve/test_runner.h"

namespace distllm::serve {
namespace {

using testing::Choice;
using testing::collect;

using testing::ByteCodec;
using testing::TestRunner;
using testing::TestRunnerOptions;

std::vector<int32_t> bytes(const std::string& s) { return ByteCodec().encode(s); }

GenerationRequest greedy(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = bytes(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

struct Fixture {
  ByteCodec codec;
  TestRunner runner;
  ServeMetrics metrics{"test"};
  Engine engine;
  Fixture(EngineConfig cfg, TestRunnerOptions opts = {}) : runner(opts), engine(runner, codec, with_checks(cfg), metrics) {
    engine.start();
  }
  static EngineConfig with_checks(EngineConfig c) {
    c.check_invariants = true;
    return c;
  }
  std::vector<Choice> run(std::vector<GenerationRequest> reqs) {
    auto q = std::make_shared<OutputQueue>();
    size_t n = reqs.size();
    engine.submit(std::move(reqs), q);
    return collect(*q, n);
  }
};

EngineConfig small_config(int blocks, bool prefix = true) {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = blocks;
  c.enable_prefix_cache = prefix;
  c.scheduler.max_num_batched_tokens = 32;
  c.scheduler.max_num_seqs = 8;
  return c;
}

TEST(Engine, GreedyMatchesUnpagedReference) {
  Fixture f(small_config(64));
  auto out = f.run({greedy("Hello, paged world!", 20)});
  auto expected = f.runner.reference_greedy(bytes("Hello, paged world!"), 20);
  EXPECT_EQ(out[0].tokens, expected);
  EXPECT_EQ(out[0].text, testing::decode_all(f.codec, expected));
  EXPECT_EQ(out[0].finish, FinishReason::kLength);
  EXPECT_EQ(out[0].prompt_tokens, 19);
  EXPECT_EQ(out[0].completion_tokens, 20);
  EXPECT_EQ(out[0].deltas, 20);  // one per token
  ASSERT_TRUE(f.engine.wait_idle(5));
  EXPECT_EQ(f.engine.stats().active_blocks, 0);
  auto m = f.metrics.snapshot();
  EXPECT_EQ(m.generation_tokens, 20);
  EXPECT_EQ(m.prompt_tokens, 19);
  EXPECT_EQ(m.success_length, 1);
}

// Many requests, shared prefixes, a cache too small for all: every output must still
// equal the unpaged reference, with the prefix cache on and off.
TEST(Engine, ConcurrentRequestsUnderPreemptionMatchReference) {
  for (bool prefix : {true, false}) {
    Fixture f(small_config(40, prefix));
    std::vector<GenerationRequest> reqs;
    std::vector<std::vector<int32_t>> expected;
    for (int i = 0; i < 16; ++i) {
      std::string prompt = std::string(i % 3 == 0 ? "shared system prompt: be brief. " : "other ") + std::to_string(i);
      int n = 10 + (i * 7) % 25;
      reqs.push_back(greedy(prompt, n));
      expected.push_back(f.runner.reference_greedy(bytes(prompt), n));
    }
    auto out = f.run(reqs);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].finish, FinishReason::kLength) << i;
      EXPECT_EQ(out[i].tokens, expected[i]) << "request " << i << " prefix cache " << prefix;
    }
    ASSERT_TRUE(f.engine.wait_idle(5));
    EngineStats s = f.engine.stats();
    EXPECT_GT(s.preemptions, 0);
    EXPECT_GT(s.max_batch_seqs, 1);
    EXPECT_EQ(s.active_blocks, 0);
    EXPECT_EQ(s.free_blocks + s.cached_blocks, 40);
    if (prefix) {
      EXPECT_GT(f.metrics.snapshot().prefix_hit_tokens, 0);
    }
  }
}

TEST(Engine, PrefixCacheHitIsReportedAndCorrect) {
  Fixture f(small_config(64));
  std::string system = "You are a helpful assistant. Answer: ";
  auto first = f.run({greedy(system + "one", 5)});
  auto second = f.run({greedy(system + "two", 5)});
  EXPECT_EQ(first[0].cached_tokens, 0);
  EXPECT_EQ(second[0].cached_tokens, 36);  // 37 shared bytes -> 9 whole blocks of 4
  EXPECT_EQ(second[0].tokens, f.runner.reference_greedy(bytes(system + "two"), 5));
}

TEST(Engine, SeededSamplingIgnoresBatchComposition) {
  auto seeded = [](const std::string& p, uint64_t seed) {
    GenerationRequest r;
    r.prompt = bytes(p);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.seed = seed;
    r.max_tokens = 24;
    return r;
  };
  Fixture alone(small_config(64));
  auto a = alone.run({seeded("tell me a story", 1234)});
  Fixture crowded(small_config(24));  // small: preemptions happen
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 9; ++i) reqs.push_back(seeded("noise " + std::to_string(i), static_cast<uint64_t>(i)));
  reqs.insert(reqs.begin() + 4, seeded("tell me a story", 1234));
  auto b = crowded.run(reqs);
  EXPECT_EQ(b[4].tokens, a[0].tokens);
  EXPECT_EQ(b[4].text, a[0].text);
  auto c = alone.run({seeded("tell me a story", 1235)});
  EXPECT_NE(c[0].tokens, a[0].tokens);
}

// The sampling API keeps the guarantee: penalties, min_p, logit_bias and
// min_tokens depend only on the sequence's own tokens.
TEST(Engine, SamplingApiIgnoresBatchComposition) {
  auto seeded = [](const std::string& p, uint64_t seed) {
    GenerationRequest r;
    r.prompt = bytes(p);
    r.sampling.temperature = 0.9f;
    r.sampling.min_p = 0.05f;
    r.sampling.presence_penalty = 0.7f;
    r.sampling.frequency_penalty = 0.3f;
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.logit_bias = {{'e', 3.0f}, {' ', -2.0f}};
    r.min_tokens = 10;
    r.seed = seed;
    r.max_tokens = 32;
    return r;
  };
  TestRunnerOptions o;
  o.eos_permille = 100;
  Fixture alone(small_config(64), o);
  auto a = alone.run({seeded("penalized story", 77)});
  Fixture crowded(small_config(24), o);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 9; ++i) reqs.push_back(seeded("noise " + std::to_string(i), static_cast<uint64_t>(i)));
  reqs.insert(reqs.begin() + 3, seeded("penalized story", 77));
  auto b = crowded.run(reqs);
  EXPECT_EQ(b[3].tokens, a[0].tokens);
  EXPECT_EQ(b[3].text, a[0].text);
  EXPECT_GT(crowded.engine.stats().preemptions, 0);
}

TEST(Engine, StopStringsTruncateText) {
  Fixture f(small_config(64));
  auto full = f.run({greedy("stop test", 30)})[0];
  ASSERT_GE(full.text.size(), 20u);
  std::string stop = full.text.substr(10, 3);
  size_t first = full.text.find(stop);
  GenerationRequest r = greedy("stop test", 30);
  r.stop = {stop};
  auto out = f.run({r})[0];
  EXPECT_EQ(out.finish, FinishReason::kStop);
  EXPECT_EQ(out.text, full.text.substr(0, first));
  EXPECT_LT(out.completion_tokens, 30);
}

TEST(Engine, EosAndStopTokenIdsEndGeneration) {
  TestRunnerOptions o;
  o.eos_permille = 150;
  Fixture f(small_config(64), o);
  auto out = f.run({greedy("eos please", 60)})[0];
  ASSERT_EQ(out.finish, FinishReason::kStop);
  EXPECT_EQ(out.tokens.back(), ByteCodec::kEos);
  EXPECT_EQ(out.text.find("<|endoftext|>"), std::string::npos);
  GenerationRequest r = greedy("eos please", 60);
  r.ignore_eos = true;
  auto longer = f.run({r})[0];
  EXPECT_EQ(longer.finish, FinishReason::kLength);
  EXPECT_EQ(longer.completion_tokens, 60);
  // A stop token id: the 3rd generated token.
  GenerationRequest s = greedy("eos please", 60);
  s.ignore_eos = true;
  s.stop_token_ids = {longer.tokens[2]};
  auto stopped = f.run({s})[0];
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_LE(stopped.completion_tokens, 3);
}

TEST(Engine, LogprobsComeWithEveryToken) {
  Fixture f(small_config(64));
  GenerationRequest r = greedy("logprobs", 5);
  r.sampling.logprobs = 3;
  auto out = f.run({r})[0];
  ASSERT_EQ(out.logprobs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out.logprobs[i].token, out.tokens[i]);
    ASSERT_EQ(out.logprobs[i].top.size(), 3u);
    EXPECT_EQ(out.logprobs[i].top[0].first, out.tokens[i]);  // greedy picks the top one
    EXPECT_LE(out.logprobs[i].logprob, 0.0f);
  }
}

TEST(Engine, RejectsRequestsThatCanNeverFit) {
  EngineConfig cfg = small_config(8);  // 32 tokens of cache
  TestRunnerOptions o;
  o.max_context = 64;
  Fixture f(cfg, o);
  auto q = std::make_shared<OutputQueue>();
  auto expect_400 = [&](GenerationRequest r, const std::string& needle) {
    try {
      f.engine.submit({r}, q);
      ADD_FAILURE() << "accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_400(greedy("x", 100), "maximum context length is 64 tokens");
  expect_400(greedy("x", 40), "KV cache holds 32 tokens");
  expect_400(greedy("", 4), "prompt is empty");
  GenerationRequest bad = greedy("x", 4);
  bad.prompt = {1, 999};
  expect_400(bad, "outside the vocabulary");
  expect_400(greedy("x", 0), "max_tokens must be at least 1");
  EXPECT_EQ(f.engine.max_completion_tokens(10), 22);
  // The largest request that fits runs fine.
  auto out = f.run({greedy("x", 31)});
  EXPECT_EQ(out[0].completion_tokens, 31);
}

TEST(Engine, QueueLimitAnswers429) {
  EngineConfig cfg = small_config(64);
  cfg.scheduler.max_num_seqs = 1;
  cfg.scheduler.max_num_batched_tokens = 8;
  cfg.max_queued_requests = 2;
  TestRunnerOptions o;
  o.step_delay_ms = 5;
  Fixture f(cfg, o);
  auto q = std::make_shared<OutputQueue>();
  f.engine.submit({greedy("a", 40)}, q);
  Timer t;
  while (f.engine.stats().running != 1 && t.seconds() < 5) std::this_thread::yield();
  f.engine.submit({greedy("b", 40)}, q);
  f.engine.submit({greedy("c", 40)}, q);
  try {
    f.engine.submit({greedy("d", 40)}, q);
    ADD_FAILURE() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 429);
  }
  EXPECT_EQ(f.metrics.snapshot().rejected, 1);
  try {
    f.engine.submit(std::vector<GenerationRequest>(3, greedy("e", 1)), q);  // n larger than the queue
    ADD_FAILURE() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
  }
  EXPECT_TRUE(f.engine.wait_idle(20));
}

TEST(Engine, AbortFreesBlocksWithinAStep) {
  TestRunnerOptions o;
  o.step_delay_ms = 10;
  Fixture f(small_config(64), o);
  auto q = std::make_shared<OutputQueue>();
  auto ids = f.engine.submit({greedy("long running request", 200)}, q);
  std::vector<OutputDelta> ds;
  while (ds.size() < 3) q->pop_all(ds, 1.0);
  EXPECT_GT(f.engine.stats().active_blocks, 0);
  int64_t steps_at_abort = f.engine.stats().steps;
  f.engine.abort(ids);
  ASSERT_TRUE(f.engine.wait_idle(5));
  EngineStats s = f.engine.stats();
  EXPECT_LE(s.steps - steps_at_abort, 2);  // the step in flight, at most
  EXPECT_EQ(s.active_blocks, 0);
  auto rest = collect(*q, 1);
  EXPECT_EQ(rest[0].finish, FinishReason::kAbort);
  EXPECT_EQ(f.metrics.snapshot().aborted, 1);
  f.engine.abort(ids);  // again: ignored
  f.engine.abort({987654});
}

TEST(Engine, ModelErrorFailsOnlyItsBatch) {
  Fixture f(small_config(64));
  auto q = std::make_shared<OutputQueue>();
  auto ids = f.engine.submit({greedy("doomed", 10)}, q);
  // Ids are sequential: fail the next request to arrive, not this one... too late for
  // this one, so fail a fresh request instead.
  f.runner.fail_request(ids[0] + 1);
  auto bad = f.run({greedy("fails", 10)});
  EXPECT_EQ(bad[0].finish, FinishReason::kError);
  EXPECT_NE(bad[0].error.find("injected failure"), std::string::npos);
  f.runner.fail_request(0);
  auto good = f.run({greedy("works", 10)});
  EXPECT_EQ(good[0].finish, FinishReason::kLength);
  collect(*q, 1);
  EXPECT_TRUE(f.engine.alive());
  EXPECT_GE(f.metrics.snapshot().failed, 1);
}

TEST(Engine, DerivesBlockCountFromMemory) {
  ByteCodec codec;
  TestRunner runner;
  ServeMetrics metrics("m");
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.kv_cache_memory_gib = 1.0 / 1024;  // 1 MiB / (16 tokens * 16 bytes) = 4096 blocks
  Engine e(runner, codec, cfg, metrics);
  EXPECT_EQ(e.num_blocks(), 4096);
  EXPECT_EQ(runner.num_blocks(), 4096);
  cfg.kv_cache_memory_gib = 1e-9;
  TestRunner runner2;
  EXPECT_THROW(Engine(runner2, codec, cfg, metrics), Error);
}

TEST(Engine, StoppedEngineRefusesWith503) {
  Fixture f(small_config(64));
  f.engine.stop();
  EXPECT_FALSE(f.engine.alive());
  auto q = std::make_shared<OutputQueue>();
  try {
    f.engine.submit({greedy("late", 3)}, q);
    ADD_FAILURE();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 503);
  }
}

// Greedy decoding with penalties, computed directly: the runner's unpaged logits,
// then presence/frequency/repetition by their definitions (sampler.h).
std::vector<int32_t> reference_penalized_greedy(const TestRunner& runner, const std::vector<int32_t>& prompt, int n,
                                                const SamplingParams& p) {
  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> out;
  for (int k = 0; k < n; ++k) {
    std::vector<float> l = runner.reference_logits(tokens);
    for (size_t id = 0; id < l.size(); ++id) {
      const auto count = std::count(out.begin(), out.end(), static_cast<int32_t>(id));
      const bool in_prompt = std::find(prompt.begin(), prompt.end(), static_cast<int32_t>(id)) != prompt.end();
      if (count > 0 || in_prompt) l[id] = l[id] > 0 ? l[id] / p.repetition_penalty : l[id] * p.repetition_penalty;
      if (count > 0) l[id] -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    }
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    tokens.push_back(next);
    out.push_back(next);
  }
  return out;
}

// The engine hands the sampler each sequence's own history, also across
// preemption (a cache of 10 blocks for 6 sequences forces it).
TEST(Engine, PenaltiesSeeEachSequencesOwnHistory) {
  Fixture f(small_config(10));
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = greedy("penalty " + std::to_string(i), 24);
    r.sampling.presence_penalty = 0.3f * static_cast<float>(i % 3);
    r.sampling.frequency_penalty = 0.2f;
    r.sampling.repetition_penalty = 1.0f + 0.25f * static_cast<float>(i % 2);
    expected.push_back(reference_penalized_greedy(f.runner, r.prompt, 24, r.sampling));
    reqs.push_back(r);
  }
  auto out = f.run(reqs);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, expected[i]) << "request " << i;
  EXPECT_NE(expected[0], f.runner.reference_greedy(reqs[0].prompt, 24)) << "the penalty changed nothing: weak test";
  EXPECT_GT(f.engine.stats().preemptions, 0);
}

TEST(Engine, LogitBiasForcesATokenAndIsValidated) {
  Fixture f(small_config(64));
  GenerationRequest r = greedy("bias", 5);
  r.sampling.logit_bias = {{'x', 100.0f}};
  auto out = f.run({r})[0];
  EXPECT_EQ(out.text, "xxxxx");
  r.sampling.logit_bias = {{9999, 1.0f}};
  auto q = std::make_shared<OutputQueue>();
  EXPECT_THROW(f.engine.submit({r}, q), RequestError);
}

// min_tokens: EOS cannot be sampled and stop strings do not match before it.
TEST(Engine, MinTokensHoldsBackEosAndStopStrings) {
  TestRunnerOptions o;
  o.eos_permille = 150;
  Fixture f(small_config(64), o);
  auto free_run = f.run({greedy("eos please", 60)})[0];
  ASSERT_EQ(free_run.finish, FinishReason::kStop);
  const int natural = free_run.completion_tokens;  // EOS included
  GenerationRequest r = greedy("eos please", 60);
  r.min_tokens = natural + 5;
  auto held = f.run({r})[0];
  EXPECT_GE(held.completion_tokens, natural + 5);
  for (int i = 0; i + 1 < held.completion_tokens && i < natural + 5; ++i) EXPECT_NE(held.tokens[i], ByteCodec::kEos);
  // Stop strings: one that occurs in the first tokens only ends the text once
  // min_tokens were generated.
  GenerationRequest ig = greedy("stop later", 40);
  ig.ignore_eos = true;
  auto full = f.run({ig})[0];
  ASSERT_GE(full.text.size(), 30u);
  const std::string stop = testing::decode_all(f.codec, {full.tokens[2]});
  GenerationRequest s = ig;
  s.stop = {stop};
  s.min_tokens = 20;
  auto stopped = f.run({s})[0];
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_GE(stopped.completion_tokens, 20);
  // The search starts with the 20th token's text.
  const std::vector<int32_t> first19(full.tokens.begin(), full.tokens.begin() + 19);
  const size_t cut = full.text.find(stop, testing::decode_all(f.codec, first19).size());
  ASSERT_NE(cut, std::string::npos) << "pick a prompt whose output repeats the stop text";
  EXPECT_EQ(stopped.text, full.text.substr(0, cut));
}

TEST(Engine, IncludeStopStrInOutputKeepsTheMatch) {
  Fixture f(small_config(64));
  auto full = f.run({greedy("stop test", 30)})[0];
  std::string stop = full.text.substr(10, 3);
  GenerationRequest r = greedy("stop test", 30);
  r.stop = {stop};
  r.include_stop_str_in_output = true;
  auto out = f.run({r})[0];
  EXPECT_EQ(out.finish, FinishReason::kStop);
  EXPECT_EQ(out.text, full.text.substr(0, full.text.find(stop) + stop.size()));
  // A stop token id keeps its text too; EOS never has any.
  GenerationRequest t = greedy("stop test", 30);
  t.stop_token_ids = {full.tokens[4]};
  t.include_stop_str_in_output = true;
  auto by_id = f.run({t})[0];
  EXPECT_EQ(by_id.finish, FinishReason::kStop);
  const auto first = std::find(full.tokens.begin(), full.tokens.end(), full.tokens[4]) - full.tokens.begin();
  EXPECT_EQ(by_id.text, full.text.substr(0, static_cast<size_t>(first) + 1));
}

}  // namespace
}  // namespace distllm::serve
