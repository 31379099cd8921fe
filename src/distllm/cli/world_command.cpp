#include "distllm/cli/world_command.h"

#include "distllm/base/error.h"

namespace distllm {

int run_on_world(Args& args, const std::function<int(Args&, const comm::ProcessGroupPtr&)>& body) {
  if (!comm::started_by_mpi_launcher()) return body(args, nullptr);
  comm::ProcessGroupPtr world = comm::init_process_group();
  int code = 0;
  try {
    code = body(args, world);
  } catch (const Error& e) {
    // A collective error (bad flags, NaN) is thrown on every rank; a rank-local one
    // or a communication failure must still end the job.
    if (world->size() == 1) throw;
    comm::abort(1, e.what());
  }
  world.reset();
  comm::finalize();
  return code;
}

void check_tp_world(int tp, const comm::ProcessGroupPtr& world, const char* command) {
  DL_CHECK(tp >= 1, "--tp must be at least 1, got %d", tp);
  const int ranks = world ? world->size() : 1;
  DL_CHECK(tp == 1 || world != nullptr,
           "--tp %d runs one process per shard: start it as `mpirun -np %d distllm %s --tp %d ...`", tp, tp, command,
           tp);
  DL_CHECK(ranks == tp, "--tp %d but the launcher started %d processes; pass -np %d to mpirun (or --tp %d)", tp, ranks,
           tp, ranks);
}

}  // namespace distllm
