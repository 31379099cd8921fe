#include "distllm/http/prometheus.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/error.h"

namespace distllm::http {

std::string prometheus_number(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  DL_ASSERT(std::is_sorted(bounds_.begin(), bounds_.end()));
}

void Histogram::observe(double value) {
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  counts_[i] += 1;  // i == bounds_.size(): only the +Inf bucket
  count_ += 1;
  sum_ += value;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string more = labels.empty() ? "" : "," + labels;
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    std::string le = i < bounds_.size() ? prometheus_number(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"" + more + "} " + std::to_string(cum) + "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + prometheus_number(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void PrometheusText::sample_text(std::string_view name, std::string_view labels, const std::string& value) {
  out_.append(name);
  if (!labels.empty()) out_.append("{").append(labels).append("}");
  out_.append(" ").append(value).append("\n");
}

void PrometheusText::sample(std::string_view name, std::string_view labels, int64_t value) {
  sample_text(name, labels, std::to_string(value));
}

void PrometheusText::sample(std::string_view name, std::string_view labels, double value) {
  sample_text(name, labels, prometheus_number(value));
}

void PrometheusText::counter(std::string_view name, std::string_view help, int64_t value, std::string_view labels) {
  family(name, "counter", help);
  sample(name, labels, value);
}

void PrometheusText::gauge(std::string_view name, std::string_view help, double value, std::string_view labels) {
  family(name, "gauge", help);
  sample(name, labels, value);
}

void PrometheusText::histogram(std::string_view name, std::string_view help, const Histogram& h,
                               const std::string& labels) {
  family(name, "histogram", help);
  h.render(out_, std::string(name), labels);
}

}  // namespace distllm::http
