// Prefill/decode disaggregation end to end, over real processes on loopback:
// serve_test_server --tiny-model (a real InferenceRunner over a tiny random GPT-2,
// the same weights in every process) as a co-located reference, a prefill replica
// and a decode replica, with the router (--prefill) in front of the pair. Greedy
// outputs through the pair equal the co-located replica's, streaming or not, and
// the decode replica's metrics show the prompt blocks arrived and were used; with
// the prefill replica gone (or serving another model) requests still succeed with
// the same output, computed locally. A prefill replica that hangs (SIGSTOP) costs a
// request seconds, not the transfer timeout, and the router stops naming it; a
// decode replica killed mid-stream leaves the client an error event and [DONE].
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/base/timer.h"
#include "distllm/client/openai_client.h"
#include "distllm/router/proxy.h"
#include "router/test_server_process.h"

namespace distllm::router {
namespace {

using Json = nlohmann::ordered_json;
using client::HttpResult;
using client::OpenAIClient;

constexpr int kBlockSize = 4;

// A tiny-model test server with this test's block size and context.
struct Proc : TestServerProcess {
  void start(const std::vector<std::string>& extra) {
    std::vector<std::string> flags = {"--port", "0", "--tiny-model", "--block-size", std::to_string(kBlockSize),
                                      "--max-context", "256"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    TestServerProcess::start(flags);
  }
};

std::vector<int> prompt_tokens(int len, int salt) {
  std::mt19937 rng(static_cast<uint32_t>(len * 1000 + salt));
  std::vector<int> t;
  for (int i = 0; i < len; ++i) t.push_back(1 + static_cast<int>(rng() % 250));
  return t;
}

Json request(const std::vector<int>& prompt, bool stream, int max_tokens = 12) {
  return Json{{"model", "test-model"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
              {"ignore_eos", true}, {"stream", stream}};
}

// The text of choice 0 (streamed or not); fails the test on an error.
std::string complete(const std::string& base, const Json& body, const httplib::Headers& headers = {}) {
  httplib::Client cli(base);
  cli.set_read_timeout(std::chrono::seconds(60));
  auto r = cli.Post("/v1/completions", headers, body.dump(), "application/json");
  EXPECT_TRUE(r) << base;
  if (!r) return "<no response>";
  EXPECT_EQ(r->status, 200) << r->body;
  if (!body.value("stream", false)) {
    Json j = Json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("choices")) return "<bad body " + r->body + ">";
    return j["choices"][0]["text"].get<std::string>();
  }
  std::string text;
  bool done = false;
  size_t pos = 0;
  while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
    size_t end = r->body.find("\n\n", pos);
    std::string data = r->body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    Json j = Json::parse(data, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << data;
    EXPECT_FALSE(j.contains("error")) << data;
    if (j.contains("choices") && !j["choices"].empty()) text += j["choices"][0].value("text", "");
  }
  EXPECT_TRUE(done) << r->body;
  return text;
}

double metric(const std::string& base, const std::string& name) {
  httplib::Client cli(base);
  auto r = cli.Get("/metrics");
  if (!r) return -1;
  size_t p = r->body.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  p = r->body.find("} ", p);
  return std::stod(r->body.substr(p + 2));
}

struct RouterThread {
  std::unique_ptr<Router> router;
  std::thread thread;
  int port = 0;
  RouterThread(const std::vector<std::string>& decode, const std::vector<std::string>& prefill,
               double health_timeout_s = 2.0) {
    RouterConfig c;
    c.port = 0;
    c.replicas = decode;
    c.prefill_replicas = prefill;
    c.replica.health_interval_s = 0.2;
    c.replica.health_timeout_s = health_timeout_s;
    c.replica.open_seconds = 0.5;
    c.replica.failure_threshold = 2;
    router = std::make_unique<Router>(c);
    port = router->bind();
    thread = std::thread([this] { router->serve(); });
    OpenAIClient probe(url(), "", 5);
    for (int i = 0; i < 100 && probe.get("/health").status != 200; ++i) usleep(20000);
  }
  ~RouterThread() {
    router->stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

// Lengths around block boundaries: shorter than a block, exact multiples, several blocks.
const std::vector<int> kLengths = {2, 3, 4, 5, 8, 9, 14, 17, 31, 46};

TEST(ServeDisaggE2E, GreedyOutputsMatchColocatedAndBlocksArrive) {
  Proc colo, prefill, decode;
  colo.start({});
  prefill.start({"--role", "prefill"});
  decode.start({"--role", "decode"});
  RouterThread router({decode.url()}, {prefill.url()});
  int64_t expected_blocks = 0, expected_hit_tokens = 0;
  for (bool stream : {false, true}) {
    for (int len : kLengths) {
      const std::vector<int> p = prompt_tokens(len, stream ? 1 : 0);
      const std::string want = complete(colo.url(), request(p, stream));
      const std::string got = complete(router.url(), request(p, stream));
      EXPECT_FALSE(want.empty());
      EXPECT_EQ(got, want) << "prompt length " << len << (stream ? " (stream)" : "");
      expected_blocks += (len - 1) / kBlockSize;
    }
  }
  // Concurrent requests (batched decodes on the decode replica, concurrent pulls and
  // prefills on the prefill replica) give the same outputs too.
  {
    std::vector<std::vector<int>> prompts;
    std::vector<std::string> want, got(8);
    for (int i = 0; i < 8; ++i) {
      prompts.push_back(prompt_tokens(10 + 5 * i, 40 + i));
      want.push_back(complete(colo.url(), request(prompts.back(), i % 2 == 1, 16)));
      expected_blocks += (10 + 5 * i - 1) / kBlockSize;
    }
    std::vector<std::thread> clients;
    for (int i = 0; i < 8; ++i)
      clients.emplace_back([&, i] { got[static_cast<size_t>(i)] = complete(router.url(), request(prompts[static_cast<size_t>(i)], i % 2 == 1, 16)); });
    for (auto& t : clients) t.join();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "concurrent request " << i;
  }
  expected_hit_tokens = expected_blocks * kBlockSize;
  const std::string d = decode.url();
  EXPECT_EQ(metric(d, "distllm:kv_transfer_fallbacks_total"), 0);
  EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), static_cast<double>(expected_blocks));
  EXPECT_GT(metric(d, "distllm:kv_transfer_bytes_received_total"), 0);
  // Every received block was used: the decode replica's prefix-cache hits are
  // exactly the transferred prompt blocks (each prompt is new to it).
  EXPECT_EQ(metric(d, "distllm:prefix_cache_hits_total"), static_cast<double>(expected_hit_tokens));
  EXPECT_EQ(metric(prefill.url(), "distllm:kv_transfer_blocks_sent_total"), static_cast<double>(expected_blocks));
}

TEST(ServeDisaggE2E, FallsBackWhenThePrefillReplicaIsGoneOrServesAnotherModel) {
  Proc colo, prefill, other, decode;
  colo.start({});
  prefill.start({"--role", "prefill"});
  other.start({"--role", "prefill", "--tiny-layers", "3"});
  decode.start({"--role", "decode", "--kv-transfer-timeout", "10"});
  const std::string d = decode.url();
  {
    RouterThread router({d}, {prefill.url()});
    const std::vector<int> p = prompt_tokens(21, 7);
    EXPECT_EQ(complete(router.url(), request(p, false)), complete(colo.url(), request(p, false)));
    EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), 5);
    prefill.kill9();
    // Right after the kill the router may still name it (fallback on the decode
    // replica) or already have dropped it (no header): either way the same output.
    for (int i = 0; i < 4; ++i) {
      const std::vector<int> q = prompt_tokens(18 + i, 8 + i);
      for (bool stream : {false, true})
        EXPECT_EQ(complete(router.url(), request(q, stream)), complete(colo.url(), request(q, stream)));
    }
  }
  // Named explicitly: a dead prefill replica, and one that serves another model.
  const double before = metric(d, "distllm:kv_transfer_fallbacks_total");
  const std::vector<int> a = prompt_tokens(26, 20), b = prompt_tokens(27, 21);
  EXPECT_EQ(complete(d, request(a, false), {{"X-KV-Prefill-From", prefill.url()}}), complete(colo.url(), request(a, false)));
  EXPECT_EQ(complete(d, request(b, true), {{"X-KV-Prefill-From", other.url()}}), complete(colo.url(), request(b, true)));
  EXPECT_EQ(metric(d, "distllm:kv_transfer_fallbacks_total"), before + 2);
  // The mismatched prefill replica is refused by the fingerprint check before any
  // block is imported.
  EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), 5);
}

// --kv-cache-dtype: the KV fingerprint names the cache dtype, so a bf16 (int8)
// decode replica pulls from a bf16 (int8) prefill replica (same output as a
// co-located server of that dtype) and refuses an f32 one by name (fallback,
// nothing imported).
void check_kv_cache_dtype_transfer(const std::string& dtype) {
  Proc colo, prefill_same, prefill_f32, decode;
  colo.start({"--kv-cache-dtype", dtype});
  prefill_same.start({"--role", "prefill", "--kv-cache-dtype", dtype});
  prefill_f32.start({"--role", "prefill"});
  decode.start({"--role", "decode", "--kv-transfer-timeout", "10", "--kv-cache-dtype", dtype});
  const std::string d = decode.url();
  const std::vector<int> a = prompt_tokens(21, 30), b = prompt_tokens(22, 31);
  EXPECT_EQ(complete(d, request(a, false), {{"X-KV-Prefill-From", prefill_same.url()}}),
            complete(colo.url(), request(a, false)));
  EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), 5);
  EXPECT_EQ(metric(d, "distllm:kv_transfer_fallbacks_total"), 0);
  EXPECT_EQ(complete(d, request(b, true), {{"X-KV-Prefill-From", prefill_f32.url()}}),
            complete(colo.url(), request(b, true)));
  EXPECT_EQ(metric(d, "distllm:kv_transfer_fallbacks_total"), 1);
  EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), 5);
}

TEST(ServeDisaggE2E, Bf16KvCacheTransfersBetweenBf16ReplicasAndRefusesF32) { check_kv_cache_dtype_transfer("bf16"); }
// int8 blocks travel with their per-token scales (the cache's own bytes).
TEST(ServeDisaggE2E, Int8KvCacheTransfersBetweenInt8ReplicasAndRefusesF32) { check_kv_cache_dtype_transfer("int8"); }

TEST(ServeDisaggE2E, ShortPromptsBelowTheThresholdAreNotPulled) {
  Proc colo, prefill, decode;
  colo.start({});
  prefill.start({"--role", "prefill"});
  decode.start({"--role", "decode", "--kv-transfer-min-tokens", "16"});
  RouterThread router({decode.url()}, {prefill.url()});
  const std::vector<int> short_prompt = prompt_tokens(15, 50), long_prompt = prompt_tokens(16, 51);
  EXPECT_EQ(complete(router.url(), request(short_prompt, false)), complete(colo.url(), request(short_prompt, false)));
  EXPECT_EQ(metric(decode.url(), "distllm:kv_transfer_pulls_total"), 0);
  EXPECT_EQ(complete(router.url(), request(long_prompt, true)), complete(colo.url(), request(long_prompt, true)));
  EXPECT_EQ(metric(decode.url(), "distllm:kv_transfer_pulls_total"), 1);
  EXPECT_EQ(metric(decode.url(), "distllm:kv_transfer_blocks_received_total"), 3);
}

TEST(ServeDisaggE2E, InternalEndpointNeedsTheApiKeyAndDecodeSendsIt) {
  Proc colo, prefill, decode;
  colo.start({});
  prefill.start({"--role", "prefill", "--api-key", "k1"});
  decode.start({"--role", "decode", "--api-key", "k1"});
  httplib::Client cli(prefill.url());
  const std::string body = Json{{"prompt_token_ids", prompt_tokens(9, 3)}}.dump();
  auto r = cli.Post("/internal/kv/prefill", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = cli.Post("/internal/kv/prefill", {{"Authorization", "Bearer k1"}}, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-distllm-kv");
  EXPECT_EQ(r->body.substr(0, 4), "DLKV");
  // Malformed bodies are refused.
  for (const char* bad : {"[]", "{}", "{\"prompt_token_ids\": []}", "{\"prompt_token_ids\": [1, 999]}",
                          "{\"prompt_token_ids\": [\"a\"]}"}) {
    r = cli.Post("/internal/kv/prefill", {{"Authorization", "Bearer k1"}}, bad, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
  }
  // A co-located replica has no such endpoint.
  httplib::Client colo_cli(colo.url());
  r = colo_cli.Post("/internal/kv/prefill", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  const std::vector<int> p = prompt_tokens(23, 4);
  EXPECT_EQ(complete(decode.url(), request(p, false),
                     {{"Authorization", "Bearer k1"}, {"X-KV-Prefill-From", prefill.url()}}),
            complete(colo.url(), request(p, false)));
  EXPECT_EQ(metric(decode.url(), "distllm:kv_transfer_blocks_received_total"), 5);
  EXPECT_EQ(metric(decode.url(), "distllm:kv_transfer_fallbacks_total"), 0);
}

// The value of `name{labels}` in the router's /metrics, or -1.
double labeled_metric(const std::string& base, const std::string& name_and_labels) {
  httplib::Client cli(base);
  auto r = cli.Get("/metrics");
  if (!r) return -1;
  size_t p = r->body.find("\n" + name_and_labels + " ");
  return p == std::string::npos ? -1 : std::stod(r->body.substr(p + name_and_labels.size() + 2));
}

TEST(ServeDisaggE2E, HungPrefillReplicaCostsSecondsNotTheTransferTimeout) {
  Proc colo, prefill, decode;
  colo.start({});
  prefill.start({"--role", "prefill"});
  decode.start({"--role", "decode", "--kv-transfer-connect-timeout", "1"});  // the transfer timeout stays 60 s
  RouterThread router({decode.url()}, {prefill.url()}, 0.5);
  const std::string d = decode.url();
  const std::vector<int> warm = prompt_tokens(21, 60);
  EXPECT_EQ(complete(router.url(), request(warm, false)), complete(colo.url(), request(warm, false)));
  EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), 5);
  prefill.stop();  // accepts connections (the kernel does), answers nothing
  // A pull from it gives up after the connect timeout and computes the prompt here.
  Timer t;
  const std::vector<int> a = prompt_tokens(26, 61);
  EXPECT_EQ(complete(d, request(a, false), {{"X-KV-Prefill-From", prefill.url()}}), complete(colo.url(), request(a, false)));
  EXPECT_LT(t.seconds(), 4.0) << "a pull from a hung prefill replica waited for the transfer timeout";
  EXPECT_EQ(metric(d, "distllm:kv_transfer_fallbacks_total"), 1);
  // The router's health checks drop it within seconds; meanwhile and after, every
  // request through the router is answered, correctly and fast.
  const std::string ready = "distllm_router_replica_ready{replica=\"" + prefill.url() + " (prefill)\"}";
  t.reset();
  for (int i = 0; i < 6; ++i) {
    const std::vector<int> q = prompt_tokens(18 + i, 62 + i);
    EXPECT_EQ(complete(router.url(), request(q, i % 2 == 1)), complete(colo.url(), request(q, i % 2 == 1))) << i;
  }
  EXPECT_LT(t.seconds(), 10.0) << "requests through the router stalled on the hung prefill replica";
  EXPECT_EQ(labeled_metric(router.url(), ready), 0) << "the router still takes the hung prefill replica as ready";
  // Thawed, it is named again and its blocks arrive.
  prefill.resume();
  for (t.reset(); labeled_metric(router.url(), ready) != 1 && t.seconds() < 10;) usleep(50000);
  ASSERT_EQ(labeled_metric(router.url(), ready), 1);
  const double received = metric(d, "distllm:kv_transfer_blocks_received_total");
  const std::vector<int> b = prompt_tokens(25, 70);
  EXPECT_EQ(complete(router.url(), request(b, false)), complete(colo.url(), request(b, false)));
  EXPECT_EQ(metric(d, "distllm:kv_transfer_blocks_received_total"), received + 6);
}

TEST(ServeDisaggE2E, DecodeReplicaKilledMidStreamEndsTheStreamWithAnErrorEvent) {
  Proc prefill, decode;
  prefill.start({"--role", "prefill"});
  decode.start({"--role", "decode", "--step-delay-ms", "20"});  // 200 tokens: ~4 s of stream
  RouterThread router({decode.url()}, {prefill.url()});
  OpenAIClient client(router.url(), "", 30);
  std::vector<Json> events;
  HttpResult r = client.post_stream("/v1/completions", request(prompt_tokens(21, 80), true, 200).dump(),
                                    [&](const std::string& data) {
                                      events.push_back(Json::parse(data, nullptr, false));
                                      if (events.size() == 3) decode.kill9();
                                      return true;
                                    });
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done) << "no [DONE] after the decode replica died";
  ASSERT_GE(events.size(), 4u);
  EXPECT_FALSE(events.back().is_discarded());
  ASSERT_TRUE(events.back().contains("error")) << events.back().dump();
  EXPECT_EQ(events.back()["error"]["code"], "replica_stream_broken");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_FALSE(events[i].contains("error")) << i;
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null()) << i;
  }
  EXPECT_EQ(labeled_metric(router.url(), "distllm_router_streams_broken_total"), 1);
}

}  // namespace
}  // namespace distllm::router
