// Asynchronous operations: several in flight, waited for in another order,
// completing in issue order, mixed with blocking calls.
#include <thread>

#include "comm_test_util.h"

namespace distllm::comm::test {
namespace {

ProcessGroupPtr backend_group(const std::string& label) {
  for (auto& [name, g] : Backends::get().groups)
    if (name == label) return g;
  throw std::runtime_error("no backend " + label);
}

class Async : public ::testing::TestWithParam<std::string> {};

TEST_P(Async, SeveralInFlightWaitedInReverse) {
  ProcessGroupPtr pg = backend_group(GetParam());
  const int n = pg->size(), me = pg->rank();
  const size_t big = 300001, small = 3;
  std::vector<float> a(big, static_cast<float>(me + 1));
  std::vector<int32_t> b(small, me), gathered(small * n, -1);
  std::vector<double> c(1000, me == 0 ? 2.5 : 0.0);
  std::vector<float> d(big, 1.0f), d_out(big, 0.0f);
  CallOptions async{.async_op = true};
  std::vector<WorkPtr> works;
  works.push_back(pg->allreduce(a.data(), big, DType::kF32, ReduceOp::kSum, async));
  works.push_back(pg->allgather(b.data(), gathered.data(), small, DType::kI32, async));
  works.push_back(pg->broadcast(c.data(), c.size(), DType::kF64, 0, async));
  works.push_back(pg->allreduce(d.data(), d_out.data(), big, DType::kF32, ReduceOp::kAvg, async));
  // Wait for the last first: everything issued before it must be complete too.
  works.back()->wait();
  for (auto& w : works) EXPECT_TRUE(w->is_completed());
  for (auto it = works.rbegin(); it != works.rend(); ++it) {
    (*it)->wait();
    EXPECT_TRUE((*it)->is_success());
    EXPECT_EQ((*it)->error_message(), "");
  }
  const float sum = static_cast<float>(n * (n + 1) / 2);
  EXPECT_EQ(a.front(), sum);
  EXPECT_EQ(a.back(), sum);
  for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[r * small + 2], r);
  EXPECT_EQ(c[999], 2.5);
  EXPECT_EQ(d_out[12345], 1.0f);
}

TEST_P(Async, BlockingCallRunsAfterQueuedOnes) {
  ProcessGroupPtr pg = backend_group(GetParam());
  const int n = pg->size();
  // The async op and the blocking one touch the same buffer: the blocking one
  // must see the async result (issue order), i.e. sum twice.
  std::vector<int64_t> x(50000, 1);
  auto w = pg->allreduce(x.data(), x.size(), DType::kI64, ReduceOp::kSum, {.async_op = true});
  pg->allreduce(x.data(), x.size(), DType::kI64, ReduceOp::kSum);
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(x[777], static_cast<int64_t>(n) * n);
}

TEST_P(Async, ManySmallOperations) {
  ProcessGroupPtr pg = backend_group(GetParam());
  const int n = pg->size(), me = pg->rank();
  std::vector<int32_t> v(64);
  std::vector<WorkPtr> works;
  for (int i = 0; i < 64; ++i) {
    v[i] = me + i;
    works.push_back(pg->allreduce(&v[i], 1, DType::kI32, ReduceOp::kMax, {.async_op = true}));
  }
  for (int i = 63; i >= 0; --i) works[i]->wait();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(v[i], n - 1 + i);
}

// Work::wait(timeout) gives up without failing the operation.
TEST_P(Async, WaitWithTimeoutGivesUpThenSucceeds) {
  ProcessGroupPtr pg = backend_group(GetParam());
  if (pg->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (pg->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto w = pg->barrier({.async_op = true});
  if (pg->rank() == 0) {
    try {
      w->wait(std::chrono::milliseconds(20));
      ADD_FAILURE() << "wait should have given up";
    } catch (const CommTimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("gave up after 0.020 s; the operation is still in flight"),
                std::string::npos)
          << e.what();
    }
  }
  w->wait();
  EXPECT_TRUE(w->is_success());
  EXPECT_FALSE(pg->failed());
}

INSTANTIATE_TEST_SUITE_P(Backends, Async, ::testing::Values("mpi", "shm", "hier2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace distllm::comm::test
