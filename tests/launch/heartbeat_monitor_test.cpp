// The heartbeat monitor: progress, a rank that stops, one that never starts, and
// which rank is to blame when every rank stalls.
#include "distllm/launch/heartbeat_monitor.h"

#include "distllm/launch/rank_agent.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace distllm::launch {
namespace {

void beat(const std::string& dir, int rank, long long step) {
  FILE* f = std::fopen((dir + "/rank_" + std::to_string(rank)).c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f, "%lld 0\n", step);
  std::fclose(f);
}

TEST(HeartbeatMonitor, NamesTheRankThatStopsOrNeverStarts) {
  char tmpl[] = "/tmp/distllm_hb_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/hb";
  HeartbeatMonitor m(dir, 2, 10.0);
  m.reset(100.0);
  EXPECT_EQ(m.poll(105.0), "");
  EXPECT_EQ(m.min_step(), -1);
  beat(dir, 0, 4);
  EXPECT_EQ(m.poll(109.0), "");
  EXPECT_EQ(m.poll(111.0), "rank 1 did not start within 11 s (no heartbeat)");
  beat(dir, 1, 4);
  EXPECT_EQ(m.poll(112.0), "");
  EXPECT_EQ(m.first_step(), 4);
  beat(dir, 0, 5);
  beat(dir, 1, 5);
  EXPECT_EQ(m.poll(115.0), "");
  EXPECT_EQ(m.min_step(), 5);
  beat(dir, 1, 6);  // rank 0 stays at step 5
  EXPECT_EQ(m.poll(120.0), "");
  EXPECT_EQ(m.poll(126.0), "rank 0 made no progress for 11 s (last step 5)");
  // A new attempt forgets everything and removes the old files.
  m.reset(200.0);
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank_0"));
  EXPECT_EQ(m.poll(201.0), "");
  std::filesystem::remove_all(tmpl);
}

// A liveness beat written `age` seconds ago, waiting on peers or not.
void alive(const std::string& dir, int rank, double age, bool waiting) {
  const double at = unix_time_now() - age;
  write_beat_file(liveness_file(dir, rank), std::to_string(at) + (waiting ? " 1 " : " 0 ") + std::to_string(at) + "\n");
}

TEST(HeartbeatMonitor, BlamesTheRankTheOthersWaitFor) {
  char tmpl[] = "/tmp/distllm_hb_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/hb";
  HeartbeatMonitor m(dir, 3, 10.0);
  m.reset(100.0);
  for (int r = 0; r < 3; ++r) beat(dir, r, 7);
  EXPECT_EQ(m.poll(101.0), "");
  // Every rank stalls at step 7. Rank 0's step came first, but ranks 0 and 2 wait
  // in a collective for rank 1, which is alive and busy elsewhere: rank 1 is named.
  alive(dir, 0, 0.5, true);
  alive(dir, 1, 0.5, false);
  alive(dir, 2, 0.5, true);
  EXPECT_EQ(m.poll(112.0), "rank 1 made no progress for 11 s (last step 7) while the other ranks wait for it");
  // Rank 2 stopped (SIGSTOP, or dead): its liveness beat is old.
  alive(dir, 1, 0.5, true);
  alive(dir, 2, 9.0, true);
  EXPECT_EQ(m.poll(113.0).rfind("rank 2 stopped responding: no liveness beat for 9 s (last step 7", 0), 0u)
      << m.poll(113.0);
  // All alive and all waiting: a deadlock, no single culprit.
  alive(dir, 2, 0.5, true);
  EXPECT_EQ(m.poll(114.0).rfind("no rank made progress for 13 s and every rank waits on its peers", 0), 0u)
      << m.poll(114.0);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace distllm::launch
