// Server metrics in Prometheus text format (0.0.4), with vLLM's metric meanings and
// a `distllm:` prefix (vLLM uses `vllm:`). Counters carry the conventional _total
// suffix. Every sample has a model_name label. Thread-safe.
//
// Histograms (seconds):
//   time_to_first_token_seconds  arrival at the engine -> first token sampled
//   inter_token_latency_seconds  between consecutive tokens of one request
//   e2e_request_latency_seconds  arrival -> finished
//   request_queue_time_seconds   arrival -> first scheduled
// Gauges: num_requests_running, num_requests_waiting, kv_cache_usage_perc (0..1,
//   the fraction of KV blocks held by requests; blocks kept only by the prefix
//   cache count as free, since they can be evicted at any time).
// Counters: prompt_tokens_total (prompt tokens of requests whose prefill finished,
//   cached ones included), generation_tokens_total, num_preemptions_total,
//   prefix_cache_queries_total / prefix_cache_hits_total (tokens looked up / found
//   in the prefix cache, vLLM's meaning), prefix_cache_query_requests_total /
//   prefix_cache_hit_requests_total (lookups / lookups that found at least one
//   block), request_success_total{finished_reason="stop"|"length"},
//   request_aborted_total (client went away), request_rejected_total (429, queue
//   full), request_failed_total (model error).
// Speculative decoding counters (vLLM's spec_decode_* meanings), only rendered once
//   the engine has verified a draft: spec_decode_num_drafts_total (verification
//   runs: sequence-steps that carried a draft), spec_decode_num_draft_tokens_total
//   (tokens proposed), spec_decode_num_accepted_tokens_total (accepted),
//   spec_decode_num_accepted_tokens_per_pos_total{position="i"} (drafts whose
//   token i, 0-based, was accepted). Acceptance rate = accepted / draft tokens;
//   mean accepted length = 1 + accepted / drafts (tokens a verification step
//   yields, the bonus or correction token included).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace distllm::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket / _sum / _count lines of `name` with `labels` ("k=\"v\"").
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

struct MetricsSnapshot {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_usage = 0.0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prefix_query_requests = 0;
  int64_t prefix_hit_requests = 0;
  int64_t success_stop = 0;
  int64_t success_length = 0;
  int64_t aborted = 0;
  int64_t rejected = 0;
  int64_t failed = 0;
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
};

class ServeMetrics {
 public:
  explicit ServeMetrics(std::string model_name);

  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);
  void observe_queue_time(double seconds);
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  enum class Finish { kStop, kLength, kAborted, kFailed };
  void count_finished(Finish how);
  void count_rejected();
  // One verified draft of `num_draft` tokens of which the first `num_accepted` matched.
  void observe_speculation(int num_draft, int num_accepted);
  // Once per engine step: gauges, and counters the engine's parts keep themselves.
  void set_step_state(int64_t running, int64_t waiting, double kv_usage, int64_t preemptions,
                      int64_t prefix_query_tokens, int64_t prefix_hit_tokens, int64_t prefix_query_requests,
                      int64_t prefix_hit_requests);

  MetricsSnapshot snapshot() const;
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string labels_;
  Histogram ttft_, itl_, e2e_, queue_;
  MetricsSnapshot s_;
};

}  // namespace distllm::serve
