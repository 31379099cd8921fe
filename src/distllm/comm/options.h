// How a process group is built. Unset fields take their environment default.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace distllm::comm {

struct GroupOptions {
  // "auto" (default), "mpi", "shm" or "hierarchical". Empty means
  // $DISTLLM_COMM_BACKEND, or "auto" when that is unset. "auto" picks shm when
  // every member is on this host, hierarchical when several hosts each hold more
  // than one member, mpi otherwise.
  std::string backend;
  // Default deadline of every operation, in seconds ($DISTLLM_COMM_TIMEOUT, 600).
  std::optional<double> timeout_s;
  // Check that all ranks call the same collective with the same arguments before
  // running it ($DISTLLM_COMM_DEBUG=1). Costs one small all-gather per call.
  std::optional<bool> debug;
  // Used in error messages; default "world", or "group<ranks>" / "<parent>/split<color>".
  std::string name;
  // Shared-memory pipeline chunk per rank, bytes ($DISTLLM_COMM_SHM_CHUNK, 256 KiB).
  size_t shm_chunk_bytes = 0;

  // TEST ONLY: pretend that every k consecutive group ranks share a host and that
  // different blocks are different hosts, so one machine exercises the
  // hierarchical backend. 0 (always, outside tests) means real host locality.
  int test_only_ranks_per_host = 0;
};

}  // namespace distllm::comm
