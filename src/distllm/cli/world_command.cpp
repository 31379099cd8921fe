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

}  // namespace distllm
