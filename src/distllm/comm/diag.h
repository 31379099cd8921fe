// Internal: answers "where are you in group G?" for other ranks.
//
// When an MPI operation times out, the waiting rank cannot see its peers' state
// (unlike the shared-memory arrival board). Every process therefore runs a small
// service thread that keeps one receive posted on a private duplicate of
// MPI_COMM_WORLD, checks it every 2 ms and answers status queries from the
// GroupStatus of each live group. An answer means the peer process is alive and
// tells which operation of the group it last entered; no answer within the wait
// means it is dead or wedged inside MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "distllm/comm/backend.h"

namespace distllm::comm::diag {

void start();  // after MPI_Init; idempotent
void stop();   // before MPI_Finalize
void register_group(const std::shared_ptr<GroupStatus>& status);
void unregister_group(uint64_t id);

struct Answer {
  bool replied = false;
  bool knows_group = false;
  uint64_t entered = 0;    // status key of the last operation it entered
  uint64_t completed = 0;  // sequence number of the last one it completed
  int kind = -1;           // OpKind of the last one it entered
};

// Asks each world rank about group `id`; waits at most `max_wait_s` in total.
std::vector<Answer> query(uint64_t id, const std::vector<int>& world_ranks, double max_wait_s);

}  // namespace distllm::comm::diag
