// Prometheus text format (0.0.4), written the same way by the server's metrics
// (serve/metrics.h), the KV transfer counters and the router's /metrics: a family
// is a "# HELP" and a "# TYPE" line followed by its samples; numbers are written
// as the shortest text that reads back as the same double.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distllm::http {

// Cumulative-bucket histogram of seconds (or any value). Not thread-safe: its
// owner locks.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket / _sum / _count lines of `name` with `labels` ("k=\"v\"",
  // or "" for none); every bucket's le is inclusive, as Prometheus defines it.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

// Shortest text that reads back as the same double ("0.1", not "0.10000000000000001").
std::string prometheus_number(double v);

// Appends to a text in the exposition format.
class PrometheusText {
 public:
  // A family's "# HELP" and "# TYPE" lines; its samples follow.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample: name{labels} value (no braces when `labels` is empty).
  void sample(std::string_view name, std::string_view labels, int64_t value);
  void sample(std::string_view name, std::string_view labels, double value);
  // A family with one sample.
  void counter(std::string_view name, std::string_view help, int64_t value, std::string_view labels = "");
  void gauge(std::string_view name, std::string_view help, double value, std::string_view labels = "");
  void histogram(std::string_view name, std::string_view help, const Histogram& h, const std::string& labels = "");

  std::string& text() { return out_; }

 private:
  void sample_text(std::string_view name, std::string_view labels, const std::string& value);
  std::string out_;
};

}  // namespace distllm::http
