// Serving benchmark metrics, measured at the client on streamed responses, with
// the definitions vLLM's `bench serve` uses (see ../shared/REFERENCE.md):
//   st    = time just before the request is sent
//   TTFT  = first streamed token chunk - st
//   ITL   = every gap between consecutive token chunks, pooled over requests
//   E2EL  = last token chunk - st
//   TPOT  = (E2EL - TTFT) / (output_tokens - 1), per request with > 1 output token
//   request throughput = completed / duration; output token throughput = sum of
//   output tokens / duration; total token throughput adds input tokens; goodput =
//   requests meeting every given SLO / duration (TPOT of a 1-token request counts
//   as 0, as in vLLM). Duration = wall time of the run.
// Percentiles interpolate linearly between order statistics (numpy's default).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace distllm::client {

struct RequestRecord {
  bool success = false;
  std::string error;
  int input_tokens = 0;
  int output_tokens = 0;  // the server's usage when it reports it, else token chunks
  double ttft = 0.0;      // seconds
  double e2el = 0.0;
  std::vector<double> itls;
};

struct Slo {  // milliseconds; unset = not part of goodput
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};

struct Distribution {
  double mean = 0, median = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
  size_t count = 0;
};

struct BenchSummary {
  size_t completed = 0, failed = 0;
  double duration = 0;
  long long input_tokens = 0, output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> goodput;
  Distribution ttft, tpot, itl, e2el;
};

double percentile(std::vector<double> values, double p);  // p in [0, 100]
Distribution distribution_ms(const std::vector<double>& seconds);
BenchSummary summarize(const std::vector<RequestRecord>& records, double duration_seconds, const Slo& slo);
// Parses "ttft:500 tpot:50 e2el:3000" (any subset, any order). Throws distllm::Error.
Slo parse_slo(const std::vector<std::string>& items);
std::string format_report(const BenchSummary& s);

}  // namespace distllm::client
