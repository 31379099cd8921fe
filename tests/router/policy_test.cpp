// Routing policies on synthetic loads: who gets picked, and that keyed policies are
// stable (consistent hashing moves only a removed replica's keys; cache-aware sticks
// to a prefix until the load is imbalanced).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "distllm/base/error.h"
#include "distllm/router/policy.h"

namespace distllm::router {
namespace {

std::vector<ReplicaLoad> loads(std::vector<int64_t> outstanding) {
  std::vector<ReplicaLoad> v;
  for (size_t i = 0; i < outstanding.size(); ++i) v.push_back({static_cast<int>(i), outstanding[i], 0});
  return v;
}

TEST(Policy, RoundRobinCycles) {
  auto p = make_policy("round_robin", 3);
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(p->pick({}, loads({0, 0, 0})));
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(Policy, LeastOutstandingAndPowerOfTwo) {
  auto least = make_policy("least_outstanding", 3);
  EXPECT_EQ(least->pick({}, loads({5, 2, 7})), 1);
  auto p2c = make_policy("power_of_two", 3);
  std::map<int, int> hist;
  for (int i = 0; i < 3000; ++i) hist[p2c->pick({}, loads({9, 0, 9}))]++;
  // Replica 1 wins every pair it is in: 2/3 of the pairs.
  EXPECT_NEAR(hist[1] / 3000.0, 2.0 / 3.0, 0.05);
  EXPECT_THROW(make_policy("random", 3), Error);
}

TEST(Policy, ConsistentHashIsStableAndMovesOnlyTheLostReplicasKeys) {
  auto p = make_policy("consistent_hash", 4);
  std::map<std::string, int> first;
  for (int k = 0; k < 400; ++k) {
    RouteKey key{"", "user-" + std::to_string(k)};
    first[key.session] = p->pick(key, loads({0, 0, 0, 0}));
    EXPECT_EQ(p->pick(key, loads({9, 0, 3, 1})), first[key.session]) << "load must not move a session";
  }
  std::set<int> used;
  for (auto& [k, r] : first) used.insert(r);
  EXPECT_EQ(used.size(), 4u);
  // Replica 2 gone: only its keys move.
  std::vector<ReplicaLoad> without2 = {{0, 0, 0}, {1, 0, 0}, {3, 0, 0}};
  for (auto& [k, r] : first) {
    int now = p->pick({"", k}, without2);
    if (r != 2) EXPECT_EQ(now, r) << k;
    else EXPECT_NE(now, 2);
  }
}

TEST(Policy, CacheAwareFollowsPrefixesUntilImbalanced) {
  auto p = make_policy("cache_aware", 3);
  const std::string system_a(300, 'a'), system_b(300, 'b');
  const int ra = p->pick({system_a + " question 1", ""}, loads({0, 0, 0}));
  const int rb = p->pick({system_b + " question 1", ""}, loads({1, 0, 1}));  // a different tenant, a quieter replica
  EXPECT_NE(ra, rb);
  for (int i = 2; i < 10; ++i) {
    EXPECT_EQ(p->pick({system_a + " question " + std::to_string(i), ""}, loads({1, 1, 1})), ra);
    EXPECT_EQ(p->pick({system_b + " question " + std::to_string(i), ""}, loads({1, 1, 1})), rb);
  }
  // One tenant dominates: its replica is far busier, so its traffic spreads.
  std::vector<int64_t> busy = {0, 0, 0};
  busy[static_cast<size_t>(ra)] = 20;
  EXPECT_NE(p->pick({system_a + " question 99", ""}, loads(busy)), ra);
}

TEST(Policy, PrefixIndexMatchesWholeBlocks) {
  PrefixIndex idx;
  const std::string a(200, 'x');
  idx.insert(0, a);
  EXPECT_EQ(idx.match(0, a), 192u);  // three whole 64-byte blocks
  EXPECT_EQ(idx.match(0, a.substr(0, 100) + std::string(100, 'y')), 64u);
  EXPECT_EQ(idx.match(1, a), 0u);
}

}  // namespace
}  // namespace distllm::router
