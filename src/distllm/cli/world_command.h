// Commands that run on one process or, started by mpirun/srun, on every rank.
#pragma once

#include <functional>

#include "distllm/cli/args.h"
#include "distllm/comm/world.h"

namespace distllm {

// Without a launcher: body(args, nullptr). Under one: creates the world, runs the
// body on every rank and finalizes MPI. An error on a rank of a multi-rank job ends
// the whole job (MPI_Abort with the message), since its peers could otherwise wait
// in a collective until the timeout; on a one-rank world it is thrown as usual.
int run_on_world(Args& args, const std::function<int(Args&, const comm::ProcessGroupPtr&)>& body);

// `--tp N` of a command that runs one process per tensor-parallel shard: throws
// distllm::Error (naming the mpirun command line to use) unless `world` has exactly
// N ranks; N = 1 needs no launcher.
void check_tp_world(int tp, const comm::ProcessGroupPtr& world, const char* command);

}  // namespace distllm
