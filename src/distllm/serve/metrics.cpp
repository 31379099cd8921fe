#include "distllm/serve/metrics.h"

#include "distllm/base/strings.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm::serve {
namespace {

// vLLM's bucket boundaries for the same histograms.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
          960.0, 1920.0, 7680.0};
}

}  // namespace

ServeMetrics::ServeMetrics(std::string model_name)
    : labels_("model_name=\"" + escape_prometheus_label(model_name) + "\""),
      ttft_(ttft_buckets()),
      itl_(itl_buckets()),
      e2e_(request_buckets()),
      queue_(request_buckets()) {}

void ServeMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}
void ServeMetrics::observe_itl(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}
void ServeMetrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}
void ServeMetrics::observe_queue_time(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.observe(s);
}
void ServeMetrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.prompt_tokens += n;
}
void ServeMetrics::add_generation_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.generation_tokens += n;
}
void ServeMetrics::count_finished(Finish how) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (how) {
    case Finish::kStop: s_.success_stop++; break;
    case Finish::kLength: s_.success_length++; break;
    case Finish::kAborted: s_.aborted++; break;
    case Finish::kFailed: s_.failed++; break;
  }
}
void ServeMetrics::count_rejected() {
  std::lock_guard<std::mutex> lock(mu_);
  s_.rejected++;
}

void ServeMetrics::observe_speculation(int num_draft, int num_accepted) {
  DL_ASSERT(num_draft >= 0 && num_accepted >= 0 && num_accepted <= num_draft);
  if (num_draft == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  s_.spec_drafts += 1;
  s_.spec_draft_tokens += num_draft;
  s_.spec_accepted_tokens += num_accepted;
  if (s_.spec_accepted_per_pos.size() < static_cast<size_t>(num_draft)) s_.spec_accepted_per_pos.resize(static_cast<size_t>(num_draft), 0);
  for (int i = 0; i < num_accepted; ++i) s_.spec_accepted_per_pos[static_cast<size_t>(i)] += 1;
}

void ServeMetrics::set_step_state(int64_t running, int64_t waiting, double kv_usage, int64_t preemptions,
                                  int64_t prefix_query_tokens, int64_t prefix_hit_tokens,
                                  int64_t prefix_query_requests, int64_t prefix_hit_requests, int source) {
  std::lock_guard<std::mutex> lock(mu_);
  StepState& st = live_[source];
  st.running = running;
  st.waiting = waiting;
  st.kv_usage = kv_usage;
  st.preemptions = preemptions;
  st.prefix_query_tokens = prefix_query_tokens;
  st.prefix_hit_tokens = prefix_hit_tokens;
  st.prefix_query_requests = prefix_query_requests;
  st.prefix_hit_requests = prefix_hit_requests;
}

void ServeMetrics::retire_source(int source) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(source);
  if (it == live_.end()) return;
  retired_.preemptions += it->second.preemptions;
  retired_.prefix_query_tokens += it->second.prefix_query_tokens;
  retired_.prefix_hit_tokens += it->second.prefix_hit_tokens;
  retired_.prefix_query_requests += it->second.prefix_query_requests;
  retired_.prefix_hit_requests += it->second.prefix_hit_requests;
  live_.erase(it);
}

void ServeMetrics::record_model_loaded(int64_t version, double loaded_at, double seconds, bool is_reload) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.model_version = version;
  s_.model_loaded_at = loaded_at;
  if (is_reload) {
    s_.model_reloads++;
    s_.model_reload_seconds = seconds;
  }
}

void ServeMetrics::count_reload_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  s_.model_reload_failures++;
}

MetricsSnapshot ServeMetrics::locked_snapshot() const {
  MetricsSnapshot s = s_;
  StepState sum = retired_;
  sum.running = sum.waiting = 0;
  for (const auto& [source, st] : live_) {
    sum.running += st.running;
    sum.waiting += st.waiting;
    sum.kv_usage = st.kv_usage;  // the map is ordered: the newest source's ends up here
    sum.preemptions += st.preemptions;
    sum.prefix_query_tokens += st.prefix_query_tokens;
    sum.prefix_hit_tokens += st.prefix_hit_tokens;
    sum.prefix_query_requests += st.prefix_query_requests;
    sum.prefix_hit_requests += st.prefix_hit_requests;
  }
  s.running = sum.running;
  s.waiting = sum.waiting;
  s.kv_usage = sum.kv_usage;
  s.preemptions = sum.preemptions;
  s.prefix_query_tokens = sum.prefix_query_tokens;
  s.prefix_hit_tokens = sum.prefix_hit_tokens;
  s.prefix_query_requests = sum.prefix_query_requests;
  s.prefix_hit_requests = sum.prefix_hit_requests;
  return s;
}

MetricsSnapshot ServeMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return locked_snapshot();
}

std::string ServeMetrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  const MetricsSnapshot snap = locked_snapshot();
  http::PrometheusText text;
  const std::string& l = labels_;
  auto gauge = [&](const char* name, const char* help, double v) {
    text.gauge(std::string("distllm:") + name, help, v, l);
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    text.counter(std::string("distllm:") + name, help, v, l);
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    text.histogram(std::string("distllm:") + name, help, h, l);
  };
  gauge("num_requests_running", "Number of requests in the running batch.", static_cast<double>(snap.running));
  gauge("num_requests_waiting", "Number of requests waiting to be scheduled (including preempted ones).",
        static_cast<double>(snap.waiting));
  gauge("kv_cache_usage_perc", "Fraction of KV cache blocks held by requests (0 to 1).", snap.kv_usage);
  counter("prompt_tokens_total", "Prompt tokens processed (prefix-cache hits included).", snap.prompt_tokens);
  counter("generation_tokens_total", "Tokens generated.", snap.generation_tokens);
  counter("num_preemptions_total", "Requests preempted (recompute) because KV blocks ran out.", snap.preemptions);
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", snap.prefix_query_tokens);
  counter("prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", snap.prefix_hit_tokens);
  counter("prefix_cache_query_requests_total", "Prefix cache lookups (one per admission).", snap.prefix_query_requests);
  counter("prefix_cache_hit_requests_total", "Prefix cache lookups that found at least one block.",
          snap.prefix_hit_requests);
  {
    const char* n = "distllm:request_success_total";
    text.family(n, "counter", "Requests finished normally, by finish reason.");
    text.sample(n, "finished_reason=\"stop\"," + l, snap.success_stop);
    text.sample(n, "finished_reason=\"length\"," + l, snap.success_length);
  }
  counter("request_aborted_total", "Requests cancelled because the client went away.", snap.aborted);
  counter("request_rejected_total", "Requests refused with 429 because the waiting queue was full.", snap.rejected);
  counter("request_failed_total", "Requests ended by a model error.", snap.failed);
  if (snap.spec_drafts > 0) {
    counter("spec_decode_num_drafts_total", "Speculative verification runs (sequence-steps carrying a draft).",
            snap.spec_drafts);
    counter("spec_decode_num_draft_tokens_total", "Draft tokens proposed and verified.", snap.spec_draft_tokens);
    counter("spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", snap.spec_accepted_tokens);
    const char* n = "distllm:spec_decode_num_accepted_tokens_per_pos_total";
    text.family(n, "counter", "Drafts whose token at this position (0-based) was accepted.");
    for (size_t i = 0; i < snap.spec_accepted_per_pos.size(); ++i)
      text.sample(n, "position=\"" + std::to_string(i) + "\"," + l, snap.spec_accepted_per_pos[i]);
  }
  if (snap.model_version > 0) {
    counter("model_reloads_total", "Models swapped in by a hot reload (after the first).", snap.model_reloads);
    counter("model_reload_failures_total", "Hot reloads refused or failed to load (the old model kept serving).",
            snap.model_reload_failures);
    gauge("model_version", "Version of the serving model: 1 at start, +1 per reload.",
          static_cast<double>(snap.model_version));
    gauge("model_loaded_timestamp_seconds", "Unix time the serving model was swapped in.", snap.model_loaded_at);
    gauge("model_reload_duration_seconds", "Seconds the last hot reload took (load, KV cache, swap).",
          snap.model_reload_seconds);
  }
  histogram("time_to_first_token_seconds", "Time from arrival to the first generated token, in seconds.", ttft_);
  histogram("inter_token_latency_seconds", "Time between consecutive generated tokens, in seconds.", itl_);
  histogram("e2e_request_latency_seconds", "Time from arrival to finish, in seconds.", e2e_);
  histogram("request_queue_time_seconds", "Time from arrival to first being scheduled, in seconds.", queue_);
  return std::move(text.text());
}

}  // namespace distllm::serve
