#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "distllm/serve/metrics.h"
#include "distllm/serve/stats_logger.h"

namespace distllm::serve {
namespace {

// Parses "name{labels} value" sample lines into a map keyed by "name{labels}".
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le is inclusive
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render(out, "x", "m=\"a\"");
  auto s = samples(out);
  EXPECT_EQ(s["x_bucket{le=\"0.1\",m=\"a\"}"], 2);
  EXPECT_EQ(s["x_bucket{le=\"1\",m=\"a\"}"], 3);
  EXPECT_EQ(s["x_bucket{le=\"+Inf\",m=\"a\"}"], 4);
  EXPECT_EQ(s["x_count{m=\"a\"}"], 4);
  EXPECT_DOUBLE_EQ(s["x_sum{m=\"a\"}"], 7.65);
}

TEST(Metrics, RendersEveryMetricWithPrefixAndLabels) {
  ServeMetrics m("my \"model\"");
  m.observe_ttft(0.02);
  m.observe_itl(0.03);
  m.observe_itl(0.04);
  m.observe_e2e(1.2);
  m.observe_queue_time(0.0);
  m.add_prompt_tokens(10);
  m.add_generation_tokens(5);
  m.count_finished(ServeMetrics::Finish::kStop);
  m.count_finished(ServeMetrics::Finish::kLength);
  m.count_finished(ServeMetrics::Finish::kLength);
  m.count_rejected();
  m.set_step_state(3, 4, 0.25, 2, 100, 64, 5, 2);
  std::string text = m.render();
  auto s = samples(text);
  const std::string l = "model_name=\"my \\\"model\\\"\"";
  EXPECT_EQ(s["distllm:num_requests_running{" + l + "}"], 3);
  EXPECT_EQ(s["distllm:num_requests_waiting{" + l + "}"], 4);
  EXPECT_EQ(s["distllm:kv_cache_usage_perc{" + l + "}"], 0.25);
  EXPECT_EQ(s["distllm:prompt_tokens_total{" + l + "}"], 10);
  EXPECT_EQ(s["distllm:generation_tokens_total{" + l + "}"], 5);
  EXPECT_EQ(s["distllm:num_preemptions_total{" + l + "}"], 2);
  EXPECT_EQ(s["distllm:prefix_cache_queries_total{" + l + "}"], 100);
  EXPECT_EQ(s["distllm:prefix_cache_hits_total{" + l + "}"], 64);
  EXPECT_EQ(s["distllm:prefix_cache_query_requests_total{" + l + "}"], 5);
  EXPECT_EQ(s["distllm:prefix_cache_hit_requests_total{" + l + "}"], 2);
  EXPECT_EQ(s["distllm:request_success_total{finished_reason=\"length\"," + l + "}"], 2);
  EXPECT_EQ(s["distllm:request_rejected_total{" + l + "}"], 1);
  EXPECT_EQ(s["distllm:time_to_first_token_seconds_count{" + l + "}"], 1);
  EXPECT_EQ(s["distllm:inter_token_latency_seconds_count{" + l + "}"], 2);
  EXPECT_EQ(s["distllm:e2e_request_latency_seconds_bucket{le=\"1.5\"," + l + "}"], 1);
  EXPECT_EQ(s["distllm:request_queue_time_seconds_count{" + l + "}"], 1);
  EXPECT_NE(text.find("# TYPE distllm:time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE distllm:prompt_tokens_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE distllm:kv_cache_usage_perc gauge\n"), std::string::npos);
}

}  // namespace
}  // namespace distllm::serve

namespace distllm::serve {
namespace {

TEST(StatsLogger, ThroughputLineSaysWhatChangedAndNothingWhenIdle) {
  MetricsSnapshot a, b;
  EXPECT_EQ(throughput_line(a, b, 10.0), "");  // idle: no line
  b.prompt_tokens = 500, b.generation_tokens = 120, b.running = 3, b.waiting = 1, b.kv_usage = 0.25;
  b.prefix_query_tokens = 400, b.prefix_hit_tokens = 100, b.preemptions = 2;
  EXPECT_EQ(throughput_line(a, b, 10.0),
            "serve: prompt 50.0 tokens/s, generation 12.0 tokens/s, running 3, waiting 1, KV cache 25.0% used, "
            "prefix cache hit rate 25.0%, 2 preemptions");
  a = b;  // nothing new, but requests still running: the line stays
  EXPECT_EQ(throughput_line(a, b, 5.0).rfind("serve: prompt 0.0 tokens/s, generation 0.0 tokens/s, running 3", 0), 0u);
}

}  // namespace
}  // namespace distllm::serve
