// The heartbeat monitor: progress, a rank that stops, one that never starts.
#include "distllm/launch/heartbeat_monitor.h"

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

}  // namespace
}  // namespace distllm::launch
