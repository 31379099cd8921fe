// Internal: polling with a deadline. Spin briefly (lowest latency when every rank
// has its own core), then yield the CPU (oversubscribed hosts), then sleep in short
// naps once a peer is clearly late (a straggler computing for seconds should not
// make the waiting ranks burn their cores). A background operation (overlapped with
// the caller's computation) naps right after a short spin: a yield loop would take
// the core from the computation it is meant to hide behind.
#pragma once

#include <immintrin.h>
#include <sched.h>
#include <time.h>

#include <algorithm>

#include "distllm/base/timer.h"
#include "distllm/comm/backend.h"

namespace distllm::comm {

class Poller {
 public:
  Poller(const OpContext& ctx, int spin_limit)
      : ctx_(ctx), spin_limit_(ctx.background ? std::min(spin_limit, kBackgroundSpins) : spin_limit) {}

  // Call once per failed poll. Returns false when the deadline has passed.
  bool next() {
    if (++iterations_ <= spin_limit_) {
      _mm_pause();
      return true;
    }
    double now = now_seconds();
    if (start_ == 0) start_ = now;
    if (now > ctx_.deadline()) return false;
    if (!ctx_.background && now - start_ < 0.05) {
      sched_yield();
    } else {
      timespec ts{0, 50'000};  // 50 us
      nanosleep(&ts, nullptr);
    }
    return true;
  }

 private:
  static constexpr int kBackgroundSpins = 64;
  const OpContext& ctx_;
  int spin_limit_;
  int iterations_ = 0;
  double start_ = 0;
};

}  // namespace distllm::comm
