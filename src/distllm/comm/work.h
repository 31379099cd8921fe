// A handle on one submitted operation (c10d's Work): callers overlap computation
// with communication and wait when they need the result.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "distllm/comm/op.h"

namespace distllm::comm {

class Work {
 public:
  Work(OpKind kind, uint64_t seq, std::string group);

  // True once the operation finished, successfully or not. Never blocks.
  bool is_completed() const { return done_.load(std::memory_order_acquire); }
  // True once it finished without error.
  bool is_success() const;
  // Blocks until the operation finished; rethrows its error (CommError family).
  void wait();
  // As wait(), but throws CommTimeoutError if it has not finished within `timeout`.
  // The operation keeps running (its own deadline still applies); call wait() again
  // or let the group's timeout fail it.
  void wait(std::chrono::duration<double> timeout);
  // The failure, or nullptr while running / after success.
  std::exception_ptr exception() const;
  std::string error_message() const;  // "" when none
  // "allreduce #7 on group 'world'"
  std::string describe() const;

  // When the operation started running and when it finished (now_seconds() clock;
  // 0 until then). Asynchronous operations queue first, so started - issue time is
  // the queueing delay and finished - started the time spent communicating.
  double started_at() const { return started_.load(std::memory_order_acquire); }
  double finished_at() const { return finished_.load(std::memory_order_acquire); }

  // Backend side: records the start, then the outcome (and wakes waiters).
  void mark_started();
  void finish(std::exception_ptr error);

 private:
  OpKind kind_;
  uint64_t seq_;
  std::string group_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::atomic<double> started_{0}, finished_{0};
  std::exception_ptr error_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace distllm::comm
