// Admission over real sockets: a burst never overshoots the engine's bound, and
// ignore_eos really ignores every EOS id.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "distllm/base/timer.h"
#include "serve_api/api_fixture.h"

namespace distllm::serve::api {
namespace {

using namespace test_support;

// 40 clients at once, each retrying as soon as it hears back for 1.5 s, against 4
// running + 4 queued: every answer is 200 or 429, every 429 is counted, and the
// scheduler never holds more than 8 (the engine records its peak itself). The
// retries matter: the overshoot happened when a submission landed between the
// engine taking requests in and publishing its new queue length.
TEST(Admission, BurstOf40NeverOvershootsRunningPlusQueued) {
  EngineConfig ec = default_engine();
  ec.scheduler.max_num_seqs = 4;
  ec.max_queued_requests = 4;
  TestRunnerOptions ro;
  ro.step_delay_ms = 10;
  ApiServerConfig sc = Server::config();
  sc.http_threads = 48;  // every client is answered at once: the race is in the engine
  Server s(ec, sc, ro);
  constexpr int kClients = 40;
  std::latch start(kClients);
  std::atomic<int> ok{0}, busy{0}, other{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      start.arrive_and_wait();
      Timer t;
      for (int k = 0; k < 300 && t.seconds() < 1.5; ++k) {
        HttpResult r = s.client.post("/v1/completions", completion("burst " + std::to_string(i), 4).dump());
        if (r.status == 200) ok++;
        else if (r.status == 429) busy++;
        else other++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(busy.load(), 1);
  EXPECT_EQ(s.metrics.snapshot().rejected, busy.load());
  EngineStats st = s.engine.stats();
  EXPECT_LE(st.peak_running_plus_waiting, 8) << "admitted past --max-num-seqs + --max-queued-requests";
  EXPECT_GE(st.peak_running_plus_waiting, 4);
  EXPECT_TRUE(s.engine.wait_idle(10));
}

// The test runner makes EOS (256) the greedy token at every step; the server adds
// it as a model stop id too (as generation_config.json's eos_token_id does).
TEST(Admission, IgnoreEosReturnsExactlyMaxTokens) {
  TestRunnerOptions ro;
  ro.eos_permille = 1000;
  ApiServerConfig sc = Server::config();
  sc.default_stop_token_ids = {256};
  Server s(default_engine(), sc, ro);

  Json plain = Json::parse(s.client.post("/v1/completions", completion("eos", 12).dump()).body);
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(plain["usage"]["completion_tokens"], 1);  // the EOS itself

  Json j = Json::parse(s.client.post("/v1/completions", completion("eos", 12, {{"ignore_eos", true}}).dump()).body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length") << j.dump();
  EXPECT_EQ(j["usage"]["completion_tokens"], 12) << j.dump();

  Json c = Json::parse(s.client.post("/v1/chat/completions", chat_request("eos", 7, {{"ignore_eos", true}}).dump()).body);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length") << c.dump();
  EXPECT_EQ(c["usage"]["completion_tokens"], 7) << c.dump();

  // A request's own stop_token_ids still apply with ignore_eos.
  Json own = Json::parse(
      s.client.post("/v1/completions", completion("eos", 12, {{"ignore_eos", true}, {"stop_token_ids", {256}}}).dump()).body);
  EXPECT_EQ(own["choices"][0]["finish_reason"], "stop") << own.dump();
  EXPECT_EQ(own["usage"]["completion_tokens"], 1);
}

}  // namespace
}  // namespace distllm::serve::api
