// The router over real replicas (serve_test_server processes on loopback): requests
// spread and succeed, a replica killed with SIGKILL under load costs no request that
// had not started streaming, its breaker opens, and traffic returns when it is back.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/base/timer.h"
#include "router/router_fixture.h"

namespace distllm::router {
namespace {

using namespace test_support;

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
  // Without `model`, the one model the replicas serve answers (as one server does).
  Json keyless = completion(100);
  keyless.erase("model");
  HttpResult one = client.post("/v1/completions", keyless.dump());
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(Json::parse(one.body)["model"], "test-model");
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

// Requests go to the replicas that serve their `model`; an alias splits by weight.
TEST(RouterE2E, RoutesByModelAndSplitsAnAliasByWeight) {
  Splits splits;
  add_split(splits, "chat", {{"model-a", 80}, {"model-b", 20}});
  Fixture f("round_robin", {{"--model-name", "model-a", "--step-delay-ms", "0"},
                            {"--model-name", "model-a", "--step-delay-ms", "0"},
                            {"--model-name", "model-b", "--step-delay-ms", "0"}},
            splits);
  OpenAIClient client(f.url(), "", 30);
  Json models = Json::parse(client.get("/v1/models").body);
  std::set<std::string> ids;
  for (const auto& m : models["data"]) ids.insert(m["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"model-a", "model-b", "chat"}));

  Json body = completion(1);
  body["model"] = "model-b";
  for (int i = 0; i < 4; ++i) ASSERT_EQ(client.post("/v1/completions", body.dump()).status, 200);
  std::string m = client.get("/metrics").body;
  EXPECT_EQ(metric(m, "distllm_router_replica_requests_total{replica=\"" + f.replicas[2].url() + "\"} "), 4)
      << "model-b requests went to a replica without model-b";
  // Which of two models a request without `model` means is the client's to say.
  body.erase("model");
  HttpResult unnamed = client.post("/v1/completions", body.dump());
  EXPECT_EQ(unnamed.status, 400);
  EXPECT_NE(unnamed.body.find("'model' is required: this router serves model-a, model-b"), std::string::npos)
      << unnamed.body;
  body["model"] = "no-such-model";
  HttpResult missing = client.post("/v1/completions", body.dump());
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("model_not_found"), std::string::npos) << missing.body;

  // 1,000 keyless requests for the alias: within +-5% of the weight (5% is 4
  // standard deviations of the binomial here).
  constexpr int kRequests = 1000;
  std::atomic<int> next{0}, to_b{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      OpenAIClient c(f.url(), "", 30);
      Timer timer;
      for (int i = next++; i < kRequests && timer.seconds() < 120; i = next++) {
        Json req = completion(i);
        req["model"] = "chat";
        req["max_tokens"] = 1;
        HttpResult r = c.post("/v1/completions", req.dump());
        if (r.status != 200) {
          failed.fetch_add(1);
          continue;
        }
        to_b += Json::parse(r.body)["model"] == "model-b";
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_NEAR(to_b.load(), kRequests * 0.2, kRequests * 0.05);
  m = client.get("/metrics").body;
  EXPECT_EQ(metric(m, "distllm_router_model_requests_total{model=\"model-b\"} "), 4 + to_b.load());
  // One user stays on one arm.
  std::set<std::string> arms;
  for (int i = 0; i < 8; ++i) {
    Json req = completion(i);
    req["model"] = "chat";
    req["user"] = "user-42";
    HttpResult r = client.post("/v1/completions", req.dump());
    ASSERT_EQ(r.status, 200);
    arms.insert(Json::parse(r.body)["model"].get<std::string>());
  }
  EXPECT_EQ(arms.size(), 1u);
}

// A replica drained under load gets no new request and loses none in flight; undrained,
// it gets traffic again.
TEST(RouterE2E, DrainLosesNoInFlightRequest) {
  Fixture f("round_robin");
  std::atomic<int> ok{0}, failed{0};
  LoadThreads load;
  for (int t = 0; t < 4; ++t) {
    load.threads.emplace_back([&, t] {
      OpenAIClient client(f.url(), "", 30);
      for (int i = 0; i < 400 && !load.stop.load(); ++i) {  // bounded in count and time
        Json body = completion(t * 1000 + i, t % 2 == 1);
        body["max_tokens"] = 24;
        HttpResult r = t % 2 == 1 ? client.post_stream("/v1/completions", body.dump(), [](const std::string&) { return true; })
                                  : client.post("/v1/completions", body.dump());
        (r.status == 200 && (t % 2 == 0 || r.done) ? ok : failed).fetch_add(1);
      }
    });
  }
  Timer t;
  while (ok.load() < 20 && t.seconds() < 20) usleep(10000);
  OpenAIClient admin(f.url(), "", 30);
  const std::string drained = f.replicas[0].url();
  EXPECT_EQ(admin.post("/admin/replicas/drain", Json{{"replica", "http://127.0.0.1:1"}}.dump()).status, 404);
  EXPECT_EQ(admin.post("/admin/replicas/drain", "{}").status, 400);
  HttpResult d = admin.post("/admin/replicas/drain", Json{{"replica", drained}}.dump());
  ASSERT_EQ(d.status, 200) << d.body;
  auto state = [&] {
    const Json all = Json::parse(admin.get("/admin/replicas").body);
    for (const auto& r : all["replicas"])
      if (r["url"] == drained) return r;
    return Json();
  };
  // In-flight requests finish; then nothing new arrives.
  Json s = state();
  ASSERT_TRUE(s.is_object());
  while (s["outstanding"].get<int64_t>() > 0 && t.seconds() < 30) {
    usleep(10000);
    s = state();
  }
  ASSERT_EQ(s["outstanding"], 0);
  EXPECT_TRUE(s["draining"].get<bool>());
  // Load signals scraped from the replica's /metrics (vLLM's gauge names).
  ASSERT_TRUE(s["kv_cache_usage"].is_number()) << s.dump();
  EXPECT_GE(s["kv_cache_usage"].get<double>(), 0.0);
  EXPECT_LE(s["kv_cache_usage"].get<double>(), 1.0);
  const int64_t at_drain = s["requests"].get<int64_t>();
  const int ok_then = ok.load();
  while (ok.load() < ok_then + 40 && t.seconds() < 40) usleep(10000);
  EXPECT_EQ(state()["requests"], at_drain) << "a draining replica got new requests";
  EXPECT_EQ(metric(admin.get("/metrics").body, "distllm_router_replica_draining{replica=\"" + drained + "\"} "), 1);
  ASSERT_EQ(admin.post("/admin/replicas/undrain", Json{{"replica", drained}}.dump()).status, 200);
  while (state()["requests"].get<int64_t>() <= at_drain + 3 && t.seconds() < 60) usleep(10000);
  load.join();
  EXPECT_GT(state()["requests"].get<int64_t>(), at_drain + 3) << "traffic did not return after undrain";
  EXPECT_EQ(failed.load(), 0) << "a drain lost requests";
}

// A replica's 4xx on a streamed request reaches the client with its status, not
// inside a 200 event stream; the API key guards the admin endpoints too.
TEST(RouterE2E, StreamedRequestErrorsKeepTheirStatus) {
  Fixture f("round_robin", {{}});
  OpenAIClient client(f.url(), "", 30);
  Json body = completion(1, true);
  body["max_tokens"] = -3;
  HttpResult r = client.post_stream("/v1/completions", body.dump(), [](const std::string&) { return true; });
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("max_tokens"), std::string::npos) << r.body;
  body = completion(2, true);
  body["model"] = "other";
  EXPECT_EQ(client.post_stream("/v1/completions", body.dump(), [](const std::string&) { return true; }).status, 404);
}

TEST(RouterE2E, AdminNeedsTheApiKey) {
  Replica rep;
  rep.start();
  RouterConfig c;
  c.port = 0;
  c.api_key = "secret";
  c.replicas = {rep.url()};
  Router router(c);
  const int port = router.bind();
  std::thread th([&] { router.serve(); });
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(OpenAIClient(url, "", 5).get("/admin/replicas").status, 401);
  EXPECT_EQ(OpenAIClient(url, "", 5).post("/admin/replicas/drain", Json{{"replica", rep.url()}}.dump()).status, 401);
  EXPECT_EQ(OpenAIClient(url, "secret", 5).get("/admin/replicas").status, 200);
  router.stop();
  th.join();
}

// Cache-aware routing keeps each tenant's shared prefix on one replica (the
// replicas' prefix caches then hit), and still spreads a tenant that dominates.
// (Tenants arriving one at a time on idle replicas all start on the first one: see
// the policy's note on why the tie is not broken by cache size.)
TEST(RouterE2E, CacheAwareKeepsTenantsOnAReplicaAndSpreadsUnderLoad) {
  // KV room for every tenant's prefix on each replica (the default is 1,024 tokens).
  Fixture f("cache_aware", {{"--num-blocks", "2048"}, {"--num-blocks", "2048"}, {"--num-blocks", "2048"}});
  OpenAIClient client(f.url(), "", 30);
  auto replica_requests = [&] {
    const std::string m = client.get("/metrics").body;
    std::vector<int64_t> n;
    for (auto& r : f.replicas) n.push_back(metric(m, "distllm_router_replica_requests_total{replica=\"" + r.url() + "\"} "));
    return n;
  };
  auto tenant_prompt = [](int tenant, int turn) {
    std::string system = "tenant " + std::to_string(tenant) + " system prompt: ";
    while (system.size() < 400) system += "you are a helpful assistant number " + std::to_string(tenant) + ". ";
    return system + "user turn " + std::to_string(turn);
  };
  for (int tenant = 0; tenant < 4; ++tenant) {
    const std::vector<int64_t> before = replica_requests();
    for (int turn = 0; turn < 6; ++turn) {
      Json body = completion(0);
      body["prompt"] = tenant_prompt(tenant, turn);
      body["max_tokens"] = 2;
      ASSERT_EQ(client.post("/v1/completions", body.dump()).status, 200);
    }
    const std::vector<int64_t> after = replica_requests();
    int replicas_used = 0;
    for (size_t i = 0; i < after.size(); ++i) {
      if (after[i] > before[i]) ++replicas_used;
    }
    EXPECT_EQ(replicas_used, 1) << "tenant " << tenant << "'s turns went to several replicas";
  }
  // The replicas' own prefix caches confirm it: most prompt tokens were hits.
  int64_t hits = 0, queries = 0;
  for (auto& r : f.replicas) {
    const std::string m = OpenAIClient(r.url(), "", 5).get("/metrics").body;
    auto value = [&](const std::string& name) {
      const size_t p = m.find("\n" + name);
      return p == std::string::npos ? int64_t{0} : std::stoll(m.substr(m.find(' ', p + 1) + 1));
    };
    hits += value("distllm:prefix_cache_hits_total");
    queries += value("distllm:prefix_cache_queries_total");
  }
  ASSERT_GT(queries, 0);
  EXPECT_GT(static_cast<double>(hits) / static_cast<double>(queries), 0.6) << hits << " of " << queries;

  // One tenant with many concurrent requests: the imbalance threshold spreads it.
  const std::vector<int64_t> before = replica_requests();
  std::vector<std::thread> clients;
  std::atomic<int> failed{0};
  for (int t = 0; t < 12; ++t) {
    clients.emplace_back([&, t] {
      OpenAIClient c(f.url(), "", 30);
      for (int i = 0; i < 4; ++i) {
        Json body = completion(0);
        body["prompt"] = tenant_prompt(0, 100 + t * 10 + i);
        body["max_tokens"] = 48;
        if (c.post("/v1/completions", body.dump()).status != 200) failed.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed.load(), 0);
  const std::vector<int64_t> after = replica_requests();
  int used = 0;
  for (size_t i = 0; i < after.size(); ++i) used += after[i] > before[i];
  EXPECT_GE(used, 2) << "a dominant tenant stayed on one replica";
}

}  // namespace
}  // namespace distllm::router
