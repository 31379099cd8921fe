// Subgroups, split, DeviceMesh shapes, backend choice and shared-memory cleanup.
#include <unistd.h>

#include <functional>
#include <numeric>

#include "comm_test_util.h"
#include "distllm/comm/device_mesh.h"

namespace distllm::comm::test {
namespace {

int sum_of(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

// Every member contributes its world rank: the sum identifies the membership.
int world_rank_sum(const ProcessGroupPtr& g) {
  int x = world()->rank();
  g->allreduce(&x, 1, DType::kI32, ReduceOp::kSum);
  return x;
}

TEST(Groups, NewGroupOfSubsets) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  std::vector<std::vector<int>> subsets = {{0}, {n - 1}};
  std::vector<int> evens, all_reversed;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  for (int r = n - 1; r >= 0; --r) all_reversed.push_back(r);
  subsets.push_back(evens);
  subsets.push_back(all_reversed);
  for (const auto& ranks : subsets) {
    auto g = new_group(ranks);
    bool member = std::find(ranks.begin(), ranks.end(), me) != ranks.end();
    ASSERT_EQ(g != nullptr, member);
    if (!g) continue;
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(g->size(), static_cast<int>(ranks.size()));
    EXPECT_EQ(g->world_ranks(), sorted);
    EXPECT_EQ(sorted[static_cast<size_t>(g->rank())], me);
    EXPECT_EQ(world_rank_sum(g), sum_of(ranks));
    EXPECT_EQ(g->backend_name(), "shm");  // one host
  }
}

TEST(Groups, SplitOrdersByKey) {
  auto w = world();
  const int me = w->rank(), n = w->size();
  auto g = w->split(me % 2, -me);
  ASSERT_NE(g, nullptr);
  std::vector<int> expect;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) expect.push_back(r);
  EXPECT_EQ(g->world_ranks(), expect);
  EXPECT_EQ(world_rank_sum(g), sum_of(expect));
  EXPECT_EQ(g->name(), "world/split" + std::to_string(me % 2));
  // A negative color opts out.
  auto none = w->split(me == 0 ? -1 : 1, 0);
  EXPECT_EQ(none == nullptr, me == 0);
  if (none) {
    EXPECT_EQ(none->size(), n - 1);
  }
}

// All ordered factorisations of n into `dims` factors.
void factorisations(int n, int dims, std::vector<int>& cur, std::vector<std::vector<int>>& out) {
  if (dims == 1) {
    cur.push_back(n);
    out.push_back(cur);
    cur.pop_back();
    return;
  }
  for (int f = 1; f <= n; ++f) {
    if (n % f) continue;
    cur.push_back(f);
    factorisations(n / f, dims - 1, cur, out);
    cur.pop_back();
  }
}

TEST(Groups, DeviceMeshEveryShape) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  const std::vector<std::string> names = {"pp", "dp", "tp"};
  for (int dims = 1; dims <= 3; ++dims) {
    std::vector<std::vector<int>> shapes;
    std::vector<int> cur;
    factorisations(n, dims, cur, shapes);
    for (const auto& shape : shapes) {
      std::vector<std::pair<std::string, int>> spec;
      for (int d = 0; d < dims; ++d) spec.emplace_back(names[3 - dims + d], shape[d]);
      DeviceMesh mesh(w, spec);
      ASSERT_EQ(mesh.rank_at(mesh.coords()), me);
      for (int d = 0; d < dims; ++d) {
        const std::string& dim = spec[d].first;
        ProcessGroupPtr g = mesh.group(dim);
        ASSERT_NE(g, nullptr);
        EXPECT_EQ(g->size(), shape[d]);
        EXPECT_EQ(g->rank(), mesh.coord(dim));
        // Expected members: my coordinates with `dim` varied.
        std::vector<int> members;
        for (int k = 0; k < shape[d]; ++k) {
          std::vector<int> c = mesh.coords();
          c[d] = k;
          members.push_back(mesh.rank_at(c));
        }
        EXPECT_EQ(g->world_ranks(), members) << dim;
        EXPECT_EQ(world_rank_sum(g), sum_of(members)) << dim;
      }
    }
  }
  // Tensor-parallel peers are consecutive ranks.
  if (n % 2 == 0) {
    DeviceMesh mesh(w, {{"dp", n / 2}, {"tp", 2}});
    EXPECT_EQ(mesh.group("tp")->world_ranks(), (std::vector<int>{me / 2 * 2, me / 2 * 2 + 1}));
  }
  try {
    DeviceMesh bad(w, {{"dp", n + 1}});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "DeviceMesh (dp=" + std::to_string(n + 1) + ") has " + std::to_string(n + 1) +
                                         " positions but group 'world' has " + std::to_string(n) + " ranks");
  }
}

TEST(Groups, AutoBackendFollowsLocality) {
  auto w = world();
  const int n = w->size();
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(w->backend_name(), "shm");
  EXPECT_EQ(w->num_hosts(), 1);
  GroupOptions one_per_host;
  one_per_host.backend = "auto";
  one_per_host.test_only_ranks_per_host = 1;
  auto g1 = new_group(all, one_per_host);
  EXPECT_EQ(g1->num_hosts(), n);
  EXPECT_EQ(g1->backend_name(), n == 1 ? "shm" : "mpi");
  GroupOptions two_per_host = one_per_host;
  two_per_host.test_only_ranks_per_host = 2;
  auto g2 = new_group(all, two_per_host);
  EXPECT_EQ(g2->num_hosts(), (n + 1) / 2);
  EXPECT_EQ(g2->backend_name(), n <= 2 ? "shm" : "hierarchical");
  EXPECT_EQ(world_rank_sum(g2), n * (n - 1) / 2);
  // Forcing shm across "hosts" is refused on every rank, before any communication.
  if (n > 1) {
    GroupOptions forced = one_per_host;
    forced.backend = "shm";
    forced.name = "forced";
    try {
      new_group(all, forced);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "backend 'shm' needs every member of group 'forced' on one host, but it spans " +
                                           std::to_string(n) + " hosts");
    }
  }
  GroupOptions bogus;
  bogus.backend = "nccl";
  try {
    new_group(all, bogus);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "communication backend 'nccl' is not one of auto, mpi, shm, hierarchical");
  }
}

TEST(Groups, SharedMemoryNameIsGoneOnceAttached) {
  auto w = world();
  std::vector<int> all(static_cast<size_t>(w->size()));
  std::iota(all.begin(), all.end(), 0);
  GroupOptions o;
  o.backend = "shm";
  auto g = new_group(all, o);
  const std::string name = g->shm_segment_name();
  ASSERT_FALSE(name.empty());
  EXPECT_NE(access(("/dev/shm" + name).c_str(), F_OK), 0) << name << " still exists";
  // And the group works after the name is gone.
  EXPECT_EQ(world_rank_sum(g), w->size() * (w->size() - 1) / 2);
}

}  // namespace
}  // namespace distllm::comm::test

namespace distllm::comm::test {
namespace {

// Bad arguments are rejected on the calling rank before any communication (so the
// other ranks, making the same mistake, stay in step).
TEST(Groups, ArgumentErrorsNameTheProblem) {
  auto w = world();
  const int n = w->size();
  auto message = [](const std::function<void()>& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  float x[4] = {0, 0, 0, 0};
  EXPECT_EQ(message([&] { w->allreduce(nullptr, 5, DType::kF32); }),
            "allreduce on group 'world': input is null but the count is 5");
  EXPECT_EQ(message([&] { w->broadcast(x, 4, DType::kF32, n); }),
            "broadcast on group 'world': root " + std::to_string(n) + " is outside [0, " + std::to_string(n) + ")");
  std::vector<size_t> short_counts(static_cast<size_t>(n) + 1, 1);
  EXPECT_EQ(message([&] { w->allgatherv(x, x, short_counts, DType::kF32); }),
            "allgatherv on group 'world': counts has " + std::to_string(n + 1) + " entries, the group has " +
                std::to_string(n) + " ranks");
  std::vector<size_t> ones(static_cast<size_t>(n), 1);
  EXPECT_EQ(message([&] { w->alltoallv(x, ones, x, ones, DType::kF32); }),
            "alltoallv on group 'world': in-place alltoallv is not supported (in and out must differ)");
  EXPECT_EQ(message([&] { w->send(x, 1, DType::kF32, w->rank()); }),
            "send on group 'world': peer " + std::to_string(w->rank()) + " must be another rank in [0, " +
                std::to_string(n) + ")");
  if (n > 1) {
    EXPECT_EQ(message([&] { w->recv(x, 1, DType::kF32, (w->rank() + 1) % n, 40000); }),
              "recv on group 'world': tag 40000 is outside [0, 32767]");
  }
  EXPECT_EQ(message([&] { w->barrier({.timeout = std::chrono::duration<double>(-1)}); }),
            "barrier on group 'world': negative timeout");
  // Still in step: a real collective works.
  int one = 1;
  w->allreduce(&one, 1, DType::kI32);
  EXPECT_EQ(one, n);
}

TEST(Groups, ShutdownGroupRefusesCalls) {
  auto w = world();
  std::vector<int> all(static_cast<size_t>(w->size()));
  std::iota(all.begin(), all.end(), 0);
  auto g = new_group(all);
  g->barrier();
  g->shutdown();
  try {
    g->barrier();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "barrier on group '" + g->name() + "': the group was shut down");
  }
}

}  // namespace
}  // namespace distllm::comm::test
