// The router over real replicas (serve_test_server processes on loopback): requests
// spread and succeed, a replica killed with SIGKILL under load costs no request that
// had not started streaming, its breaker opens, and traffic returns when it is back.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "distllm/base/timer.h"
#include "distllm/router/proxy.h"
#include "distllm/serve/api/openai_client.h"

namespace distllm::router {
namespace {

using Json = nlohmann::ordered_json;
using serve::api::HttpResult;
using serve::api::OpenAIClient;

struct Replica {
  pid_t pid = -1;
  int stdin_fd = -1;
  int port = 0;

  // port 0: any free port.
  void start(int want_port = 0) {
    int in[2], out[2];
    ASSERT_EQ(pipe(in), 0);
    ASSERT_EQ(pipe(out), 0);
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      // Nothing else of the parent's: another replica's stdin pipe held open here
      // would keep that replica from seeing EOF when the test closes it.
      for (int fd = 3; fd < 1024; ++fd) close(fd);
      const std::string p = std::to_string(want_port);
      execl(SERVE_TEST_SERVER, SERVE_TEST_SERVER, "--port", p.c_str(), "--step-delay-ms", "2",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_fd = in[1];
    std::string line;
    char ch;
    while (read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
    close(out[0]);
    ASSERT_EQ(std::sscanf(line.c_str(), "listening on %d", &port), 1) << line;
  }
  void kill9() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(stdin_fd);
      pid = -1;
    }
  }
  ~Replica() {
    if (pid > 0) {
      close(stdin_fd);  // the server exits when its stdin closes
      waitpid(pid, nullptr, 0);
    }
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

Json completion(int i, bool stream = false) {
  return Json{{"model", "test-model"}, {"prompt", "request " + std::to_string(i)}, {"max_tokens", 8},
              {"temperature", 0}, {"stream", stream}};
}

int64_t metric(const std::string& text, const std::string& line_prefix) {
  size_t p = text.find(line_prefix);
  if (p == std::string::npos) return -1;
  return std::stoll(text.substr(p + line_prefix.size()));
}

struct Fixture {
  Replica replicas[3];
  std::unique_ptr<Router> router;
  std::thread thread;
  int port = 0;

  explicit Fixture(const std::string& policy) {
    RouterConfig c;
    c.port = 0;
    c.policy = policy;
    c.replica.health_interval_s = 0.2;
    c.replica.open_seconds = 0.5;
    c.replica.failure_threshold = 2;
    for (auto& r : replicas) {
      r.start();
      c.replicas.push_back(r.url());
    }
    router = std::make_unique<Router>(c);
    port = router->bind();
    thread = std::thread([this] { router->serve(); });
    OpenAIClient probe(url(), "", 5);
    for (int i = 0; i < 100 && probe.get("/health").status != 200; ++i) usleep(20000);
  }
  ~Fixture() {
    router->stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

TEST(RouterE2E, SpreadsServesModelsAndStreams) {
  Fixture f("round_robin");
  OpenAIClient client(f.url(), "", 30);
  for (int i = 0; i < 12; ++i) {
    HttpResult r = client.post("/v1/completions", completion(i).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Json::parse(r.body)["choices"][0]["finish_reason"], "length");
  }
  int events = 0;
  HttpResult s = client.post_stream("/v1/completions", completion(99, true).dump(), [&](const std::string&) {
    ++events;
    return true;
  });
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_GE(events, 8);
  Json models = Json::parse(client.get("/v1/models").body);
  ASSERT_EQ(models["data"].size(), 1u) << "the union of three replicas serving one model";
  const std::string m = client.get("/metrics").body;
  for (auto& r : f.replicas)
    EXPECT_EQ(metric(m, "distllm_router_replica_requests_total{replica=\"" + r.url() + "\"} "), 13 / 3 + (&r == &f.replicas[0] ? 1 : 0));
  // Hostile input gets 4xx from the router itself; a body above the limit is never forwarded.
  EXPECT_EQ(client.post("/v1/completions", "{not json").status, 400);
  EXPECT_EQ(client.post("/v1/completions", std::string(3 << 20, 'x')).status, 413);
}

// A client that leaves a stream early cancels the request on the replica.
TEST(RouterE2E, ClientDisconnectCancelsUpstream) {
  Fixture f("round_robin");
  OpenAIClient client(f.url(), "", 30);
  Json body = completion(7, true);
  body["max_tokens"] = 400;  // ~1 s of steps at 2 ms each: still running when we leave
  int events = 0;
  HttpResult r = client.post_stream("/v1/completions", body.dump(), [&](const std::string&) { return ++events < 3; });
  EXPECT_TRUE(r.cancelled);
  // Whichever replica had it records an abort and runs nothing shortly after.
  Timer t;
  int64_t aborted = 0;
  while (aborted < 1 && t.seconds() < 10) {
    usleep(50000);
    aborted = 0;
    for (auto& rep : f.replicas) {
      OpenAIClient direct(rep.url(), "", 5);
      const std::string m = direct.get("/metrics").body;
      const size_t p = m.find("\ndistllm:request_aborted_total");
      if (p != std::string::npos) aborted += std::stoll(m.substr(m.find(' ', p + 1) + 1));
    }
  }
  EXPECT_EQ(aborted, 1) << "the replica kept generating for a client that left";
}

TEST(RouterE2E, ReplicaKilledUnderLoadLosesNoRequest) {
  Fixture f("least_outstanding");
  std::atomic<int> ok{0}, failed{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      OpenAIClient client(f.url(), "", 30);
      for (int i = 0; i < 400 && !stop.load(); ++i) {  // bounded in count and time
        HttpResult r = client.post("/v1/completions", completion(t * 1000 + i).dump());
        (r.status == 200 ? ok : failed).fetch_add(1);
      }
    });
  }
  Timer t;
  while (ok.load() < 20 && t.seconds() < 20) usleep(10000);
  f.replicas[1].kill9();
  const int at_kill = ok.load();
  while (ok.load() < at_kill + 40 && t.seconds() < 40) usleep(10000);
  OpenAIClient client(f.url(), "", 30);
  const std::string dead = f.replicas[1].url();
  std::string m = client.get("/metrics").body;
  EXPECT_EQ(metric(m, "distllm_router_replica_breaker{replica=\"" + dead + "\",state=\"open\"} "), 1) << m;
  EXPECT_EQ(metric(m, "distllm_router_replica_ready{replica=\"" + dead + "\"} "), 0);
  // Back on the same port: health checks see it, the breaker closes, traffic returns.
  f.replicas[1].start(f.replicas[1].port);
  const int64_t before = metric(client.get("/metrics").body, "distllm_router_replica_requests_total{replica=\"" + dead + "\"} ");
  int64_t after = before;
  while (after <= before + 3 && t.seconds() < 60) {
    usleep(50000);
    after = metric(client.get("/metrics").body, "distllm_router_replica_requests_total{replica=\"" + dead + "\"} ");
  }
  stop.store(true);
  for (auto& c : clients) c.join();
  EXPECT_GT(after, before + 3) << "traffic did not return to the restarted replica";
  EXPECT_EQ(failed.load(), 0) << "requests failed although two replicas stayed up";
  EXPECT_GT(ok.load(), 60);
  m = client.get("/metrics").body;
  EXPECT_EQ(metric(m, "distllm_router_replica_breaker{replica=\"" + dead + "\",state=\"closed\"} "), 1) << m;
}

}  // namespace
}  // namespace distllm::router
