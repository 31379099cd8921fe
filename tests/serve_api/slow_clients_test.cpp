// Slow and idle clients must not lock anyone out: with 1,000 of them connected,
// /health and a completion are answered within a second, and the idle server
// does not spin. Connection caps refuse the excess with a 503. Each test runs
// against the server and against the router in front of it (edge_target.h).
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <time.h>

#include <memory>
#include <vector>

#include "serve_api/api_fixture.h"
#include "serve_api/edge_target.h"
#include "serve_api/raw_client.h"

namespace distllm::serve::api {
namespace {

using namespace test_support;

class SlowClients : public ::testing::TestWithParam<EdgeKind> {};
INSTANTIATE_TEST_SUITE_P(Edge, SlowClients, ::testing::Values(EdgeKind::kServer, EdgeKind::kRouter));

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Client and server share this process: two descriptors per connection.
bool raise_fd_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  if (rl.rlim_cur >= want) return true;
  rl.rlim_cur = std::min(want, rl.rlim_max);
  return setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= want;
}

TEST_P(SlowClients, AThousandDoNotLockOutRealRequests) {
  if (!raise_fd_limit(2600)) GTEST_SKIP() << "needs 2,600 open files";
  EdgeTarget s(GetParam());
  // 1,000 connections from 4 client addresses (the per-address cap is 512): half
  // never send a byte, half send part of a head and then trickle.
  std::vector<std::unique_ptr<RawConnection>> slow;
  const char* from[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
  for (int i = 0; i < 1000; ++i) {
    slow.push_back(std::make_unique<RawConnection>(s.port, from[i % 4]));
    ASSERT_TRUE(slow.back()->connected()) << i;
    if (i % 2) slow.back()->send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-");
  }
  Timer wait;
  while (s.open_connections() < 1000 && wait.seconds() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(s.open_connections(), 1000);
  for (int i = 1; i < 1000; i += 2) slow[static_cast<size_t>(i)]->send("L");  // trickle

  OpenAIClient quick("http://127.0.0.1:" + std::to_string(s.port), "", 1.0);
  Timer t;
  EXPECT_EQ(quick.get("/health").status, 200);
  EXPECT_LT(t.seconds(), 1.0);
  t.reset();
  HttpResult r = quick.post("/v1/completions", completion("still served", 4).dump());
  EXPECT_EQ(r.status, 200) << r.body << r.transport_error;
  EXPECT_LT(t.seconds(), 1.0);

  // Idle with 1,000 connections open: no thread spins.
  double cpu = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(process_cpu_seconds() - cpu, 0.2) << "CPU seconds used in one idle second";
  slow.clear();
}

TEST_P(SlowClients, ConnectionCapsAnswer503) {
  ApiServerConfig sc = Server::config();
  sc.max_connections_per_ip = 3;
  sc.max_connections = 6;
  EdgeTarget s(GetParam(), sc);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawConnection>(s.port, "127.0.0.2"));
  Timer wait;
  while (s.open_connections() < 3 && wait.seconds() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  RawConnection fourth(s.port, "127.0.0.2");
  bool eof = false;
  std::string answer = fourth.read_until_close(5, &eof);
  EXPECT_EQ(count_status(answer, 503), 1) << answer;
  EXPECT_NE(answer.find("too many open connections from 127.0.0.2"), std::string::npos) << answer;
  EXPECT_TRUE(eof);
  // Other addresses still get in, up to the total.
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawConnection>(s.port, "127.0.0.3"));
  wait.reset();
  while (s.open_connections() < 6 && wait.seconds() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  RawConnection seventh(s.port, "127.0.0.4");
  EXPECT_EQ(count_status(seventh.read_until_close(5, &eof), 503), 1);
  held.clear();  // once they are gone, requests are served again
  wait.reset();
  while (s.open_connections() > 0 && wait.seconds() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.client.get("/health").status, 200);
}

}  // namespace
}  // namespace distllm::serve::api
