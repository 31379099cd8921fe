// Failures are loud and never hang: a rank that skips a collective makes the others
// fail within the timeout with a message naming the op, group, sequence number and
// missing rank; debug mode reports mismatched calls with both sides' arguments.
#include <functional>
#include <numeric>

#include "comm_test_util.h"

namespace distllm::comm::test {
namespace {

ProcessGroupPtr fresh(const std::string& backend, int fake_hosts, const std::string& name, double timeout,
                      bool debug = false) {
  GroupOptions o;
  o.backend = backend;
  o.test_only_ranks_per_host = fake_hosts;
  o.name = name;
  o.timeout_s = timeout;
  o.debug = debug;
  std::vector<int> all(static_cast<size_t>(world()->size()));
  std::iota(all.begin(), all.end(), 0);
  return new_group(all, o);
}

struct Flavor {
  std::string backend;
  int fake_hosts;
};

class Failures : public ::testing::TestWithParam<Flavor> {};

TEST_P(Failures, SkippedCallTimesOutNamingTheMissingRank) {
  const int n = world()->size(), me = world()->rank();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  for (bool async : {false, true}) {
    const std::string name = "skip-" + GetParam().backend + (async ? "-async" : "");
    auto g = fresh(GetParam().backend, GetParam().fake_hosts, name, 0.5);
    float x[4] = {1, 2, 3, 4};
    g->allreduce(x, 4, DType::kF32);  // #1 succeeds everywhere
    if (me != n - 1) {
      Timer timer;
      try {
        auto w = g->allreduce(x, 4, DType::kF32, ReduceOp::kSum, {.async_op = async});
        w->wait();
        ADD_FAILURE() << "allreduce should have timed out";
      } catch (const CommTimeoutError& e) {
        double took = timer.seconds();
        EXPECT_GE(took, 0.45);
        EXPECT_LT(took, 5.0);
        std::string msg = e.what();
        EXPECT_EQ(e.op(), "allreduce");
        EXPECT_EQ(e.seq(), 2u);
        EXPECT_EQ(e.not_arrived(), std::vector<int>{n - 1}) << msg;
        const std::string head = "allreduce #2 on group '" + name + "' (";
        EXPECT_EQ(msg.rfind(head, 0), 0u) << msg;
        EXPECT_NE(msg.find("timed out after 0.5 s: ranks [" + std::to_string(n - 1) + "] did not arrive (rank " +
                           std::to_string(n - 1) + " last entered #1"),
                  std::string::npos)
            << msg;
      }
      EXPECT_TRUE(g->failed());
      // The group is unusable from now on, and says why.
      try {
        g->barrier();
        ADD_FAILURE();
      } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find("barrier on group '" + name + "' refused: the group failed earlier: "),
                  std::string::npos)
            << e.what();
      }
    }
    world()->barrier();
  }
}

TEST_P(Failures, PointToPointTimesOut) {
  const int n = world()->size(), me = world()->rank();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  auto g = fresh(GetParam().backend, GetParam().fake_hosts, "p2p-" + GetParam().backend, 0.3);
  if (me == 0) {
    double x = 0;
    try {
      g->recv(&x, 1, DType::kF64, 1, 3);
      ADD_FAILURE();
    } catch (const CommTimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("recv #1 on group 'p2p-" + GetParam().backend +
                                           "' (" ),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("peers [1] did not complete the matching operations"), std::string::npos)
          << e.what();
    }
  }
  world()->barrier();
}

TEST_P(Failures, DebugModeReportsFirstMismatch) {
  const int n = world()->size(), me = world()->rank();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string name = "debug-" + GetParam().backend;
  auto g = fresh(GetParam().backend, GetParam().fake_hosts, name, 5.0, true);
  const std::string last = std::to_string(n - 1);
  auto expect_mismatch = [&](const std::function<void()>& call, const std::string& want) {
    try {
      call();
      ADD_FAILURE() << "expected a mismatch: " << want;
    } catch (const CommMismatchError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  };
  float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  // Different counts.
  expect_mismatch([&] { g->allreduce(x, me == n - 1 ? 5 : 4, DType::kF32); },
                  "debug check on group '" + name + "': rank 0 called allreduce#1(count=4, dtype=f32, op=sum) but rank " +
                      last + " called allreduce#1(count=5, dtype=f32, op=sum)");
  // The group is still usable after a mismatch.
  g->allreduce(x, 8, DType::kF32);
  EXPECT_EQ(x[7], static_cast<float>(n));
  EXPECT_FALSE(g->failed());
  // Different collectives.
  expect_mismatch(
      [&] {
        if (me == n - 1)
          g->broadcast(x, 4, DType::kF32, 0);
        else
          g->allreduce(x, 4, DType::kF32, ReduceOp::kMax);
      },
      "debug check on group '" + name + "': rank 0 called allreduce#3(count=4, dtype=f32, op=max) but rank " + last +
          " called broadcast#3(count=4, dtype=f32, root=0)");
  // Different dtype.
  expect_mismatch([&] { g->allreduce(x, 2, me == n - 1 ? DType::kI32 : DType::kF32, ReduceOp::kMin); },
                  "debug check on group '" + name + "': rank 0 called allreduce#4(count=2, dtype=f32, op=min) but rank " +
                      last + " called allreduce#4(count=2, dtype=i32, op=min)");
  // alltoallv whose counts disagree between sender and receiver: rank 0 sends one
  // element more to the last rank than that rank expects.
  std::vector<size_t> sc(n, 1), rc(n, 1);
  if (me == 0) sc[n - 1] = 2;
  std::vector<float> in(n + 1, 1.0f), out(n + 1, 0.0f);
  expect_mismatch([&] { g->alltoallv(in.data(), sc, out.data(), rc, DType::kF32); },
                  "debug check on group '" + name + "': alltoallv#5: rank 0 sends 2 elements to rank " + last +
                      " but rank " + last + " expects 1");
  world()->barrier();
}

INSTANTIATE_TEST_SUITE_P(Backends, Failures,
                         ::testing::Values(Flavor{"shm", 0}, Flavor{"mpi", 0}, Flavor{"hierarchical", 2},
                                           Flavor{"hierarchical", 1}),
                         [](const auto& info) {
                           return info.param.backend + std::to_string(info.param.fake_hosts);
                         });

}  // namespace
}  // namespace distllm::comm::test
