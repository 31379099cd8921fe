#include "distllm/client/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "distllm/base/error.h"

namespace distllm::client {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution distribution_ms(const std::vector<double>& seconds) {
  Distribution d;
  d.count = seconds.size();
  if (seconds.empty()) return d;
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) ms.push_back(s * 1e3);
  d.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  d.median = percentile(ms, 50);
  d.p90 = percentile(ms, 90);
  d.p99 = percentile(ms, 99);
  d.max = *std::max_element(ms.begin(), ms.end());
  return d;
}

BenchSummary summarize(const std::vector<RequestRecord>& records, double duration, const Slo& slo) {
  BenchSummary s;
  s.duration = duration;
  std::vector<double> ttfts, tpots, itls, e2els;
  size_t good = 0;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      s.failed++;
      continue;
    }
    s.completed++;
    s.input_tokens += r.input_tokens;
    s.output_tokens += r.output_tokens;
    ttfts.push_back(r.ttft);
    e2els.push_back(r.e2el);
    itls.insert(itls.end(), r.itls.begin(), r.itls.end());
    double tpot = 0.0;
    if (r.output_tokens > 1) {
      tpot = (r.e2el - r.ttft) / static_cast<double>(r.output_tokens - 1);
      tpots.push_back(tpot);
    }
    bool ok = (!slo.ttft_ms || r.ttft * 1e3 <= *slo.ttft_ms) && (!slo.tpot_ms || tpot * 1e3 <= *slo.tpot_ms) &&
              (!slo.e2el_ms || r.e2el * 1e3 <= *slo.e2el_ms);
    good += ok ? 1 : 0;
  }
  if (duration > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration;
    s.output_throughput = static_cast<double>(s.output_tokens) / duration;
    s.total_token_throughput = static_cast<double>(s.input_tokens + s.output_tokens) / duration;
    if (slo.any()) s.goodput = static_cast<double>(good) / duration;
  }
  s.ttft = distribution_ms(ttfts);
  s.tpot = distribution_ms(tpots);
  s.itl = distribution_ms(itls);
  s.e2el = distribution_ms(e2els);
  return s;
}

Slo parse_slo(const std::vector<std::string>& items) {
  Slo slo;
  for (const std::string& item : items) {
    size_t colon = item.find(':');
    DL_CHECK(colon != std::string::npos, "--goodput takes name:milliseconds pairs (ttft, tpot, e2el), got '%s'", item.c_str());
    std::string name = item.substr(0, colon);
    char* end = nullptr;
    double ms = std::strtod(item.c_str() + colon + 1, &end);
    DL_CHECK(end && *end == '\0' && colon + 1 < item.size() && ms > 0,
             "--goodput %s: the limit must be a positive number of milliseconds", item.c_str());
    if (name == "ttft") slo.ttft_ms = ms;
    else if (name == "tpot") slo.tpot_ms = ms;
    else if (name == "e2el") slo.e2el_ms = ms;
    else throw_error(strprintf("--goodput: unknown metric '%s' (use ttft, tpot or e2el)", name.c_str()));
  }
  return slo;
}

std::string format_report(const BenchSummary& s) {
  std::string out;
  auto line = [&](const char* label, const std::string& value) { out += strprintf("%-40s %s\n", label, value.c_str()); };
  auto num = [](double v) { return strprintf("%.2f", v); };
  auto section = [&](const char* title) {
    std::string t = strprintf(" %s ", title);
    size_t pad = t.size() < 50 ? 50 - t.size() : 0;
    out += std::string(pad / 2, '-') + t + std::string(pad - pad / 2, '-') + "\n";
  };
  auto dist = [&](const char* name, const Distribution& d) {
    line(strprintf("Mean %s (ms):", name).c_str(), num(d.mean));
    line(strprintf("Median %s (ms):", name).c_str(), num(d.median));
    line(strprintf("P90 %s (ms):", name).c_str(), num(d.p90));
    line(strprintf("P99 %s (ms):", name).c_str(), num(d.p99));
  };
  out += "============ Serving Benchmark Result ============\n";
  line("Successful requests:", std::to_string(s.completed));
  line("Failed requests:", std::to_string(s.failed));
  line("Benchmark duration (s):", num(s.duration));
  line("Total input tokens:", std::to_string(s.input_tokens));
  line("Total generated tokens:", std::to_string(s.output_tokens));
  line("Request throughput (req/s):", num(s.request_throughput));
  if (s.goodput) line("Request goodput (req/s):", num(*s.goodput));
  line("Output token throughput (tok/s):", num(s.output_throughput));
  line("Total token throughput (tok/s):", num(s.total_token_throughput));
  section("Time to First Token");
  dist("TTFT", s.ttft);
  section("Time per Output Token (excl. 1st token)");
  dist("TPOT", s.tpot);
  section("Inter-token Latency");
  dist("ITL", s.itl);
  section("End-to-end Latency");
  dist("E2EL", s.e2el);
  out += "==================================================\n";
  return out;
}

}  // namespace distllm::client
