// Whether this process is blocked waiting on its peers (inside a blocking
// collective, or waiting for an asynchronous one), for a supervisor's hang
// diagnosis: when a job stops making progress, the rank that is not waiting while
// the others wait for it is the one to blame (launch/rank_agent.h reports this).
// comm/ marks its waits; nothing else needs to.
#pragma once

namespace distllm {

// Marks the scope as a wait on peers (nests; thread-safe).
class PeerWait {
 public:
  PeerWait();
  ~PeerWait();
  PeerWait(const PeerWait&) = delete;
  PeerWait& operator=(const PeerWait&) = delete;
};

struct PeerWaitState {
  int waiting = 0;     // threads waiting on peers now
  double since = 0;    // unix time the oldest current wait began (0 when none)
};
PeerWaitState peer_wait_state();

}  // namespace distllm
