// Internal: two-level all-reduce for groups spanning hosts. Inside each host the
// shared-memory backend reduce-scatters (each local rank owns 1/L of the message),
// ranks with the same local index all-reduce their piece across hosts over MPI
// (one communicator per local index, so L transfers run in parallel), then each
// host all-gathers. bf16/f16 partial sums stay f32 between the levels, so the
// result is rounded once. Hosts with unequal rank counts reduce to local rank 0,
// which alone crosses hosts, then broadcast in the host. Other collectives run on
// MPI over the whole group.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/comm/backend.h"
#include "distllm/comm/mpi_backend.h"
#include "distllm/comm/shm_backend.h"

namespace distllm::comm {

class HierBackend : public Backend {
 public:
  // Collective over `group`. `local` holds this host's members, `inter` the members
  // with the same local rank on every host. Does not own the communicators.
  HierBackend(MPI_Comm group, MPI_Comm local, MPI_Comm inter, bool uniform_hosts, size_t chunk_bytes);
  const char* name() const override { return "hierarchical"; }
  void run(const Op& op, const OpContext& ctx) override;
  const std::string& segment_name() const { return local_.segment_name(); }

 private:
  int rank_, size_, local_rank_, local_size_;
  bool uniform_;
  ShmBackend local_;
  MpiBackend inter_, full_;
  std::vector<int> local_to_group_, inter_to_group_;
  AlignedBuffer<float> wide_;

  void allreduce(const Op& op, const OpContext& ctx);
};

}  // namespace distllm::comm
