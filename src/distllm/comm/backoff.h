// Internal: polling with a deadline. Spin briefly (lowest latency when every rank
// has its own core), then yield the CPU (oversubscribed hosts), then sleep in short
// naps once a peer is clearly late (a straggler computing for seconds should not
// make the waiting ranks burn their cores).
#pragma once

#include <immintrin.h>
#include <sched.h>
#include <time.h>

#include "distllm/base/timer.h"
#include "distllm/comm/backend.h"

namespace distllm::comm {

class Poller {
 public:
  Poller(const OpContext& ctx, int spin_limit) : ctx_(ctx), spin_limit_(spin_limit) {}

  // Call once per failed poll. Returns false when the deadline has passed.
  bool next() {
    if (++iterations_ <= spin_limit_) {
      _mm_pause();
      return true;
    }
    double now = now_seconds();
    if (start_ == 0) start_ = now;
    if (now > ctx_.deadline()) return false;
    if (now - start_ < 0.05) {
      sched_yield();
    } else {
      timespec ts{0, 50'000};  // 50 us
      nanosleep(&ts, nullptr);
    }
    return true;
  }

 private:
  const OpContext& ctx_;
  int spin_limit_;
  int iterations_ = 0;
  double start_ = 0;
};

}  // namespace distllm::comm
