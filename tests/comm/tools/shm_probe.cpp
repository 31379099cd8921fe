// Runs a few shared-memory all-reduces and prints the segment name; with
// --crash-rank R, rank R kills itself (SIGKILL) while the others are inside a
// collective. shm_cleanup_test.sh checks /dev/shm afterwards.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "distllm/comm/world.h"

int main(int argc, char** argv) {
  using namespace distllm::comm;
  int crash_rank = -1;
  if (argc == 3 && std::strcmp(argv[1], "--crash-rank") == 0) crash_rank = std::atoi(argv[2]);
  GroupOptions o;
  o.backend = "shm";
  o.timeout_s = 20;
  auto w = init_process_group(o);
  if (w->rank() == 0) {
    std::printf("segment %s\n", w->shm_segment_name().c_str());
    std::fflush(stdout);
  }
  std::vector<float> x(100000, 1.0f);
  for (int i = 0; i < 20; ++i) w->allreduce(x.data(), x.size(), DType::kF32, ReduceOp::kAvg);
  if (w->rank() == crash_rank) std::raise(SIGKILL);
  w->allreduce(x.data(), x.size(), DType::kF32, ReduceOp::kSum);
  w.reset();
  finalize();
  return 0;
}
