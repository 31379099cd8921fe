#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/client/bench_stats.h"
#include "distllm/client/load_generator.h"

namespace distllm::client {
namespace {

TEST(BenchStats, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({5}, 99), 5);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

// Two requests worked by hand with REFERENCE.md's definitions.
TEST(BenchStats, DefinitionsFollowVllm) {
  RequestRecord a;  // 5 tokens: first after 0.1 s, then gaps 0.02, 0.02, 0.04, 0.02 -> E2EL 0.2
  a.success = true;
  a.input_tokens = 10;
  a.output_tokens = 5;
  a.ttft = 0.1;
  a.itls = {0.02, 0.02, 0.04, 0.02};
  a.e2el = 0.2;
  RequestRecord b;  // a single token
  b.success = true;
  b.input_tokens = 20;
  b.output_tokens = 1;
  b.ttft = 0.3;
  b.e2el = 0.3;
  RequestRecord c;
  c.success = false;
  Slo slo;
  slo.ttft_ms = 200;
  BenchSummary s = summarize({a, b, c}, 2.0, slo);
  EXPECT_EQ(s.completed, 2u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 18.0);
  ASSERT_TRUE(s.goodput.has_value());
  EXPECT_DOUBLE_EQ(*s.goodput, 0.5);  // only a meets TTFT <= 200 ms
  EXPECT_DOUBLE_EQ(s.ttft.mean, 200.0);
  EXPECT_EQ(s.tpot.count, 1u);  // b has one token: no TPOT
  EXPECT_NEAR(s.tpot.mean, 25.0, 1e-9);  // (200 - 100) / (5 - 1)
  EXPECT_EQ(s.itl.count, 4u);
  EXPECT_NEAR(s.itl.mean, 25.0, 1e-9);
  EXPECT_NEAR(s.itl.median, 20.0, 1e-9);
  EXPECT_NEAR(s.e2el.p99, 200 + 0.99 * 100, 1e-9);
  // TPOT SLO: a 1-token request counts as TPOT 0 (vLLM).
  Slo tpot;
  tpot.tpot_ms = 10;
  EXPECT_DOUBLE_EQ(*summarize({a, b}, 1.0, tpot).goodput, 1.0);
  EXPECT_FALSE(summarize({a}, 1.0, Slo{}).goodput.has_value());
  std::string report = format_report(s);
  EXPECT_NE(report.find("Mean TPOT (ms):"), std::string::npos);
  EXPECT_NE(report.find("Request goodput (req/s):"), std::string::npos);
}

TEST(BenchStats, ParsesGoodputSlos) {
  Slo s = parse_slo({"ttft:500", "e2el:3000.5"});
  EXPECT_EQ(*s.ttft_ms, 500);
  EXPECT_FALSE(s.tpot_ms.has_value());
  EXPECT_EQ(*s.e2el_ms, 3000.5);
  EXPECT_THROW(parse_slo({"ttft"}), Error);
  EXPECT_THROW(parse_slo({"latency:5"}), Error);
  EXPECT_THROW(parse_slo({"ttft:-1"}), Error);
  EXPECT_THROW(parse_slo({"ttft:abc"}), Error);
}

TEST(LoadGenerator, PromptsHaveExactLengthsAndTheSharedPrefix) {
  LoadConfig c;
  c.input_len = 100;
  c.output_len = 7;
  c.shared_prefix_fraction = 0.3;
  auto a = nlohmann::json::parse(load_request_body(c, "m", 0));
  auto b = nlohmann::json::parse(load_request_body(c, "m", 1));
  ASSERT_EQ(a["prompt"].size(), 100u);
  EXPECT_EQ(a["max_tokens"], 7);
  EXPECT_EQ(a["ignore_eos"], true);
  EXPECT_EQ(a["stream"], true);
  EXPECT_EQ(a["stream_options"]["include_usage"], true);
  int same = 0;
  while (same < 100 && a["prompt"][same] == b["prompt"][same]) ++same;
  EXPECT_EQ(same, 30);
  for (auto& id : a["prompt"]) EXPECT_TRUE(id.get<int>() >= 1000 && id.get<int>() < 30000);
  // Same seed, same prompts; chat sends words.
  EXPECT_EQ(load_request_body(c, "m", 5), load_request_body(c, "m", 5));
  c.chat = true;
  auto chat = nlohmann::json::parse(load_request_body(c, "m", 0));
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_FALSE(chat["messages"][0]["content"].get<std::string>().empty());
}

}  // namespace
}  // namespace distllm::client
