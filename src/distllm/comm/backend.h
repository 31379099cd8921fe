// Internal: what the ProcessGroup front end asks of a backend. A backend runs one
// operation at a time, synchronously, on the calling thread; the front end owns
// queues, threads, sequence numbers, debug checks and error messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distllm/base/timer.h"
#include "distllm/comm/op.h"

namespace distllm::comm {

// What this rank is doing in a group, readable by other ranks' status queries
// (diag.h). Keys are seq << 2 | phase (phase: the hierarchical backend's level).
struct GroupStatus {
  uint64_t id = 0;
  std::atomic<uint64_t> entered{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<int> kind{-1};
};

inline uint64_t status_key(uint64_t seq, unsigned phase) { return seq << 2 | phase; }

struct OpContext {
  uint64_t seq = 0;        // collective (or p2p) sequence number in the group, from 1
  double timeout_s = 0;
  // The deadline (now_seconds() clock), fixed the first time anyone waits: an
  // operation that never has to wait never reads the clock.
  double deadline() const {
    if (deadline_ == 0) deadline_ = now_seconds() + timeout_s;
    return deadline_;
  }
  mutable double deadline_ = 0;
  GroupStatus* status = nullptr;
  unsigned phase = 0;      // hierarchical level (0 for single-level backends)
  int spin_limit = 512;    // busy-poll iterations before yielding the CPU
  bool background = false;  // asynchronous: after a short spin, nap instead of yielding
};

// Thrown by a backend when the deadline passes. The front end turns it into a
// CommTimeoutError naming the operation.
struct BackendTimeout {
  // Ranks (group numbering) that an arrival board shows behind, with the key
  // they last entered.
  std::vector<std::pair<int, uint64_t>> behind;
  // Ranks whose state is unknown locally: the front end asks them (diag.h).
  std::vector<int> ask;
  std::string detail;  // where it was waiting, e.g. "inter-host all-reduce"
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Runs op to completion or throws BackendTimeout / distllm::Error.
  virtual void run(const Op& op, const OpContext& ctx) = 0;
};

}  // namespace distllm::comm
