// Multi-rank GoogleTest driver: run under `mpirun -n K`. Every rank runs every test
// in the same order; only rank 0 prints the usual report, other ranks print their
// failures prefixed with their rank. The exit status is non-zero on every rank if
// any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm_test_util.h"
#include "distllm/comm/world.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  using namespace distllm::comm;
  GroupOptions o;
  o.timeout_s = distllm::comm::test::kTestTimeout;
  auto world = init_process_group(o);
  if (world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = failed;
  world->allreduce(&any, 1, DType::kI32, ReduceOp::kMax);
  if (world->rank() == 0 && any && !failed) std::fprintf(stderr, "a test failed on another rank (see above)\n");
  world.reset();
  finalize();
  return any;
}
