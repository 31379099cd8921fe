// Where a training step's communication time goes: how long collectives ran, and
// how much of that the training thread spent waiting (the part not hidden behind
// computation). `bench train` and the step log report both.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/base/timer.h"
#include "distllm/comm/work.h"

namespace distllm {

struct CommTime {
  double busy_s = 0;     // sum of the collectives' running times (they may overlap)
  double exposed_s = 0;  // training thread blocked on communication
  int64_t bytes = 0;     // payload this rank handed to collectives
  int64_t ops = 0;
  // Share of the communication time that ran behind computation, in [0, 1].
  double hidden_fraction() const {
    if (busy_s <= 0) return 1.0;
    double h = 1.0 - exposed_s / busy_s;
    return h < 0 ? 0 : (h > 1 ? 1 : h);
  }
  CommTime& operator+=(const CommTime& o) {
    busy_s += o.busy_s;
    exposed_s += o.exposed_s;
    bytes += o.bytes;
    ops += o.ops;
    return *this;
  }
};

class CommTracker {
 public:
  // An asynchronous operation: its running time is added when it is collected.
  void issued(const comm::WorkPtr& work, int64_t bytes) {
    pending_.push_back(work);
    now_.bytes += bytes;
    ++now_.ops;
  }
  // Waits for an issued operation, counting the wait as exposed.
  void wait(const comm::WorkPtr& work) {
    if (!work->is_completed()) {
      Timer t;
      work->wait();
      now_.exposed_s += t.seconds();
    } else {
      work->wait();  // rethrows a failure
    }
  }
  // Runs a blocking collective: all of its time is communication, all exposed.
  template <typename Fn>
  void blocking(int64_t bytes, Fn&& fn) {
    Timer t;
    fn();
    double s = t.seconds();
    now_.busy_s += s;
    now_.exposed_s += s;
    now_.bytes += bytes;
    ++now_.ops;
  }
  // The totals since the last call; operations still running are counted later.
  CommTime take() {
    std::vector<comm::WorkPtr> running;
    for (auto& w : pending_) {
      if (w->is_completed())
        now_.busy_s += w->finished_at() - w->started_at();
      else
        running.push_back(w);
    }
    pending_ = std::move(running);
    CommTime out = now_;
    now_ = {};
    return out;
  }

 private:
  std::vector<comm::WorkPtr> pending_;
  CommTime now_;
};

}  // namespace distllm
