// The router when replicas fail under it, over real processes on loopback: a
// replica killed (SIGKILL) in the middle of a stream leaves the client an error
// event and [DONE], never a silently short 200; with every replica down, a model
// they served is a 503 with Retry-After (a retry may succeed), and only a model no
// replica ever served is a 404.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "distllm/base/timer.h"
#include "router/router_fixture.h"

namespace distllm::router {
namespace {

using namespace test_support;

// What a client saw of a stream.
struct Seen {
  HttpResult result;
  std::vector<Json> events;  // every data payload but [DONE], parsed
  int finish_reasons = 0;
};

// Streams `body` and calls `at_event(n)` after the n-th event (1-based).
Seen stream(const std::string& url, const Json& body, const std::function<void(int)>& at_event = {}) {
  Seen s;
  OpenAIClient client(url, "", 30);
  s.result = client.post_stream("/v1/completions", body.dump(), [&](const std::string& data) {
    Json j = Json::parse(data, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "a broken event reached the client: " << data;
    s.events.push_back(j);
    if (j.contains("choices"))
      for (const auto& c : j["choices"]) s.finish_reasons += !c["finish_reason"].is_null();
    if (at_event) at_event(static_cast<int>(s.events.size()));
    return true;
  });
  return s;
}

TEST(RouterFailures, ReplicaKilledMidStreamEndsTheStreamWithAnErrorEvent) {
  Fixture f("round_robin", {{"--step-delay-ms", "20"}});  // 400 tokens: ~8 s of stream
  Json body = completion(1, true);
  body["max_tokens"] = 400;
  Timer t;
  Seen s = stream(f.url(), body, [&](int n) {
    if (n == 3) f.replicas[0].kill9();
  });
  EXPECT_LT(t.seconds(), 6.0) << "the stream was not ended when its replica died";
  EXPECT_EQ(s.result.status, 200);
  EXPECT_TRUE(s.result.done) << "no [DONE] after the replica died: " << s.result.transport_error;
  EXPECT_EQ(s.finish_reasons, 0) << "the replica died before finishing";
  ASSERT_GE(s.events.size(), 4u);
  const Json& last = s.events.back();
  ASSERT_TRUE(last.contains("error")) << "the stream ended without an error event: " << last.dump();
  EXPECT_EQ(last["error"]["code"], "replica_stream_broken") << last.dump();
  EXPECT_EQ(last["error"]["type"], "server_error");
  EXPECT_NE(last["error"]["message"].get<std::string>().find(f.replicas[0].url()), std::string::npos);
  for (size_t i = 0; i + 1 < s.events.size(); ++i) EXPECT_FALSE(s.events[i].contains("error")) << i;
  const std::string m = OpenAIClient(f.url(), "", 5).get("/metrics").body;
  EXPECT_EQ(metric(m, "\ndistllm_router_streams_broken_total "), 1) << m;
  EXPECT_GE(metric(m, "distllm_router_replica_failures_total{replica=\"" + f.replicas[0].url() + "\"} "), 1);
}

// A stream that completes is passed through untouched: no error event, one [DONE].
TEST(RouterFailures, CompleteStreamsGetNoErrorEvent) {
  Fixture f("round_robin", {{}});
  for (int i = 0; i < 5; ++i) {
    Seen s = stream(f.url(), completion(i, true));
    EXPECT_EQ(s.result.status, 200);
    EXPECT_TRUE(s.result.done);
    EXPECT_EQ(s.finish_reasons, 1);
    for (const Json& e : s.events) EXPECT_FALSE(e.contains("error")) << e.dump();
  }
  EXPECT_EQ(metric(OpenAIClient(f.url(), "", 5).get("/metrics").body, "\ndistllm_router_streams_broken_total "), 0);
}

TEST(RouterFailures, EveryReplicaDownIs503WithRetryAfterAndOnlyAnUnknownModelIs404) {
  Fixture f("round_robin", {{}, {}});
  OpenAIClient client(f.url(), "", 10);
  ASSERT_EQ(client.post("/v1/completions", completion(0).dump()).status, 200);
  Json other = completion(1);
  other["model"] = "never-served";
  EXPECT_EQ(client.post("/v1/completions", other.dump()).status, 404);
  f.replicas[0].kill9();
  f.replicas[1].kill9();
  // Before and after the health checks notice (every 0.2 s), for 3 s: always 503.
  Timer t;
  int answered = 0;
  while (t.seconds() < 3) {
    HttpResult r = client.post("/v1/completions", completion(2).dump());
    EXPECT_EQ(r.status, 503) << "at " << t.seconds() << " s: " << r.body;
    EXPECT_EQ(r.retry_after, "1") << r.body;
    EXPECT_NE(r.body.find("no_replica_available"), std::string::npos) << r.body;
    HttpResult s = client.post_stream("/v1/completions", completion(3, true).dump(), [](const std::string&) { return true; });
    EXPECT_EQ(s.status, 503) << s.body;
    EXPECT_EQ(s.retry_after, "1");
    ++answered;
    usleep(100000);
  }
  EXPECT_GE(answered, 10);
  HttpResult unknown = client.post("/v1/completions", other.dump());
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_NE(unknown.body.find("model_not_found"), std::string::npos);
  const std::string m = client.get("/metrics").body;
  EXPECT_GE(metric(m, "\ndistllm_router_model_unavailable_total "), 1) << m;
  // Back on its port: served again.
  f.replicas[1].start(f.replicas[1].port);
  int status = 0;
  for (t.reset(); status != 200 && t.seconds() < 10; usleep(50000))
    status = client.post("/v1/completions", completion(4).dump()).status;
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace distllm::router
