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
// Hot reload (reloadable_engine.h): model_reloads_total (models swapped in after
//   the first), model_reload_failures_total (reloads refused or failed to load),
//   model_version (1 for the model the server started with, +1 per reload),
//   model_loaded_timestamp_seconds (Unix time the serving model was swapped in),
//   model_reload_duration_seconds (load + swap time of the last reload).
//
// Several engines may share one ServeMetrics (during a reload the old engine
// finishes its requests while the new one takes new ones): each reports its step
// state under its own `source`; counters add up over every engine that ever
// reported (a retired engine's totals are kept), running and waiting add up over
// the live engines, and kv_cache_usage_perc is the newest live engine's (the
// highest source).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "distllm/http/prometheus.h"

namespace distllm::serve {

// The one Prometheus histogram (http/prometheus.h), under the name the engine uses.
using http::Histogram;

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
  int64_t model_reloads = 0;
  int64_t model_reload_failures = 0;
  int64_t model_version = 0;
  double model_loaded_at = 0.0;
  double model_reload_seconds = 0.0;
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
  // Once per engine step: gauges, and counters the engine's parts keep themselves
  // (that engine's totals so far).
  void set_step_state(int64_t running, int64_t waiting, double kv_usage, int64_t preemptions,
                      int64_t prefix_query_tokens, int64_t prefix_hit_tokens, int64_t prefix_query_requests,
                      int64_t prefix_hit_requests, int source = 0);
  // The engine reporting as `source` is gone: its counters stay in the totals, its
  // gauges leave them.
  void retire_source(int source);
  // Hot reload: a model swapped in (`version`, at Unix time `loaded_at`, after
  // `seconds` of loading), or a reload that was refused or failed.
  void record_model_loaded(int64_t version, double loaded_at, double seconds, bool is_reload);
  void count_reload_failure();

  MetricsSnapshot snapshot() const;
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string labels_;
  Histogram ttft_, itl_, e2e_, queue_;
  MetricsSnapshot s_;  // step-state fields: filled from the sources by snapshot()
  struct StepState {
    int64_t running = 0, waiting = 0;
    double kv_usage = 0.0;
    int64_t preemptions = 0, prefix_query_tokens = 0, prefix_hit_tokens = 0, prefix_query_requests = 0,
            prefix_hit_requests = 0;
  };
  std::map<int, StepState> live_;  // per source
  StepState retired_;              // counters of retired sources
  MetricsSnapshot locked_snapshot() const;
};

}  // namespace distllm::serve
