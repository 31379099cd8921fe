// Process-wide setup: the world group, subgroups, and shutdown.
//
// Rank discovery is MPI's (MPI_Init_thread), so the same binary runs under
// `mpirun -n N` and under Slurm's `srun --mpi=pmix`; no launcher environment
// variable is read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distllm/comm/options.h"
#include "distllm/comm/process_group.h"

namespace distllm::comm {

// Initialises MPI (MPI_THREAD_MULTIPLE) unless the program already did, starts the
// status service and builds the world group. Collective over MPI_COMM_WORLD; call
// once per process.
ProcessGroupPtr init_process_group(const GroupOptions& options = {});
bool is_initialized();
// True when this process was started by an MPI launcher (mpirun/mpiexec, or srun
// with PMIx/PMI): lets a command that also runs alone decide whether to call
// init_process_group. Rank discovery itself is still MPI's.
bool started_by_mpi_launcher();
// The world group (throws if init_process_group has not run).
ProcessGroupPtr world();

// Collective over the world (every rank calls it, like c10d's new_group): a group of
// the given world ranks, ordered by world rank. Non-members get nullptr. Without
// options the group inherits the world's.
ProcessGroupPtr new_group(std::vector<int> ranks);
ProcessGroupPtr new_group(std::vector<int> ranks, const GroupOptions& options);

// Shuts every group down and finalises MPI (if init_process_group initialised it).
// MPI_Finalize waits for every rank: after a communication failure on which other
// ranks may be stuck, call abort() instead.
void finalize();

// Prints `why` (prefixed with the world rank) to stderr and ends the whole job now
// with exit status `code` (MPI_Abort): the way out after a timeout when peers may
// never reach finalize().
[[noreturn]] void abort(int code, const std::string& why);

}  // namespace distllm::comm
