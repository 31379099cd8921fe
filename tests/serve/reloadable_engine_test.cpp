// ReloadableEngine (serve/reloadable_engine.h): a request that runs when a new model
// is installed finishes on the old one; new requests go to the new one; ids stay
// unique and aborts reach the engine that holds the id; the old engine is freed
// once idle; metrics counters never go back.
#include "distllm/serve/reloadable_engine.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "distllm/base/timer.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"
#include "serve/test_runner.h"

namespace distllm::serve {
namespace {

using testing::ByteCodec;
using testing::collect;
using testing::TestRunner;
using testing::TestRunnerOptions;

GenerationRequest greedy(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = ByteCodec().encode(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

EngineConfig config() {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 128;
  c.scheduler.max_num_batched_tokens = 32;
  c.scheduler.max_num_seqs = 8;
  c.check_invariants = true;
  return c;
}

// Two "models": the plain test runner and a copying one (other greedy outputs),
// each slowed so a long request is still running when the other is installed.
std::shared_ptr<TestRunner> model(int which) {
  TestRunnerOptions o;
  o.step_delay_ms = 5;
  if (which == 2) o.copy_period = 3;
  return std::make_shared<TestRunner>(o);
}

bool wait_for(const std::function<bool()>& cond, double seconds = 30) {
  Timer t;
  while (!cond() && t.seconds() < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return cond();
}

TEST(ReloadableEngine, RunningRequestsFinishOnOldModelNewOnesSeeNew) {
  ByteCodec codec;
  ServeMetrics metrics("m");
  ReloadableEngine e(codec, config(), metrics);
  EXPECT_THROW(e.submit({greedy("x", 1)}, std::make_shared<OutputQueue>()), RequestError);  // nothing installed
  auto m1 = model(1), m2 = model(2);
  const auto prompt = ByteCodec().encode("Hot reload");
  const auto expected1 = m1->reference_greedy(prompt, 60), expected2 = m2->reference_greedy(prompt, 60);
  ASSERT_NE(expected1, expected2);

  ASSERT_EQ(e.install(m1), 1);
  EXPECT_TRUE(e.alive());
  auto q_old = std::make_shared<OutputQueue>();
  auto q_abort = std::make_shared<OutputQueue>();
  std::vector<uint64_t> old_ids = e.submit({greedy("Hot reload", 60)}, q_old);
  std::vector<uint64_t> abort_ids = e.submit({greedy("cancel me", 100)}, q_abort);
  ASSERT_TRUE(wait_for([&] { return e.stats().running == 2; }));

  ASSERT_EQ(e.install(m2), 2);
  EXPECT_EQ(e.version(), 2);
  EXPECT_EQ(e.retiring(), 1);
  auto q_new = std::make_shared<OutputQueue>();
  std::vector<uint64_t> new_ids = e.submit({greedy("Hot reload", 60)}, q_new);
  std::set<uint64_t> ids(old_ids.begin(), old_ids.end());
  ids.insert(abort_ids.begin(), abort_ids.end());
  ids.insert(new_ids.begin(), new_ids.end());
  EXPECT_EQ(ids.size(), 3u) << "ids unique across versions";
  EXPECT_EQ(old_ids[0] >> ReloadableEngine::kVersionShift, 1u);
  EXPECT_EQ(new_ids[0] >> ReloadableEngine::kVersionShift, 2u);
  EXPECT_EQ(e.stats().requests, 3) << "stats count both engines";

  // An abort of an old request reaches the old engine.
  e.abort(abort_ids);
  auto aborted = collect(*q_abort, 1);
  EXPECT_EQ(aborted[0].finish, FinishReason::kAbort);
  EXPECT_LT(aborted[0].completion_tokens, 100);

  auto old_out = collect(*q_old, 1);
  auto new_out = collect(*q_new, 1);
  EXPECT_EQ(old_out[0].tokens, expected1) << "the running request finishes on the old weights";
  EXPECT_EQ(new_out[0].tokens, expected2) << "a request after the swap sees the new weights";

  // The old engine is stopped and freed once idle; only the new runner is held.
  ASSERT_TRUE(wait_for([&] { return e.retiring() == 0; }));
  EXPECT_TRUE(wait_for([&] { return m1.use_count() == 1; }));
  EXPECT_TRUE(e.wait_idle(5));
  EXPECT_EQ(e.stats().num_blocks, 128);
  MetricsSnapshot s = metrics.snapshot();
  EXPECT_EQ(s.success_length, 2);
  EXPECT_EQ(s.aborted, 1);
  EXPECT_EQ(s.generation_tokens, 120 + aborted[0].completion_tokens);
  e.stop();
}

TEST(ReloadableEngine, CountersKeepRetiredEnginesTotals) {
  ServeMetrics m("m");
  m.set_step_state(2, 1, 0.5, 3, 100, 40, 5, 2, /*source=*/1);
  m.set_step_state(1, 0, 0.25, 1, 10, 4, 1, 1, /*source=*/2);
  MetricsSnapshot s = m.snapshot();
  EXPECT_EQ(s.running, 3);
  EXPECT_EQ(s.waiting, 1);
  EXPECT_EQ(s.kv_usage, 0.25);  // the newest engine's cache
  EXPECT_EQ(s.preemptions, 4);
  EXPECT_EQ(s.prefix_query_tokens, 110);
  m.retire_source(1);
  s = m.snapshot();
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.preemptions, 4) << "a retired engine's counters stay";
  EXPECT_EQ(s.prefix_hit_tokens, 44);
  m.record_model_loaded(2, 1e9, 0.5, true);
  std::string text = m.render();
  EXPECT_NE(text.find("distllm:model_reloads_total{model_name=\"m\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("distllm:model_version{model_name=\"m\"} 2"), std::string::npos) << text;
}

TEST(ReloadableEngine, AbortAllAndWaitIdleCoverEveryVersion) {
  ByteCodec codec;
  ServeMetrics metrics("m");
  ReloadableEngine e(codec, config(), metrics);
  e.install(model(1));
  auto q1 = std::make_shared<OutputQueue>();
  e.submit({greedy("one", 200)}, q1);
  ASSERT_TRUE(wait_for([&] { return e.stats().running == 1; }));
  e.install(model(2));
  auto q2 = std::make_shared<OutputQueue>();
  e.submit({greedy("two", 200)}, q2);
  EXPECT_FALSE(e.wait_idle(0.05));
  e.abort_all("shutting down");
  EXPECT_EQ(collect(*q1, 1)[0].finish, FinishReason::kAbort);
  EXPECT_EQ(collect(*q2, 1)[0].finish, FinishReason::kAbort);
  EXPECT_TRUE(e.wait_idle(10));
  e.stop();
}

}  // namespace
}  // namespace distllm::serve
