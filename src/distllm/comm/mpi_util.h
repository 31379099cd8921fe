// Internal: MPI helpers shared by the backends.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <vector>

#include "distllm/comm/backend.h"
#include "distllm/comm/op.h"

namespace distllm::comm {

// Throws distllm::Error "MPI error in <what>: <MPI's message>" unless rc is MPI_SUCCESS.
void mpi_check(int rc, const char* what);
#define DL_MPI(call) ::distllm::comm::mpi_check((call), #call)

// Element type for moving data. bf16/f16 travel as 16-bit integers (no reduction).
MPI_Datatype mpi_dtype(DType t);
// kAvg maps to MPI_SUM (the caller divides).
MPI_Op mpi_op(ReduceOp op);
// MPI counts are int: throws naming the operation when a count does not fit.
int mpi_count(size_t count, const char* what);

// Polls `req` until it completes. At the deadline throws BackendTimeout asking
// every rank in `suspects` (group numbering) for its state; the request is left
// pending (the group is failed from then on and the communicator never reused).
void mpi_wait(MPI_Request* req, const OpContext& ctx, const std::vector<int>& suspects, const char* detail);
void mpi_wait_all(std::vector<MPI_Request>& reqs, const OpContext& ctx, const std::vector<int>& suspects,
                  const char* detail);

// send / recv / batch_p2p over `comm` (every backend routes point-to-point
// through MPI; Open MPI uses shared memory between processes on one host).
void run_p2p(MPI_Comm comm, const Op& op, const OpContext& ctx);

// All ranks of a communicator of `size` except `self`.
std::vector<int> all_but(int size, int self);

}  // namespace distllm::comm
