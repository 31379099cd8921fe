// Wall-clock timing on the monotonic clock.
#pragma once

#include <chrono>

namespace distllm {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

class Timer {
 public:
  Timer() : start_(now_seconds()) {}
  void reset() { start_ = now_seconds(); }
  double seconds() const { return now_seconds() - start_; }
  double millis() const { return seconds() * 1e3; }

 private:
  double start_;
};

}  // namespace distllm
