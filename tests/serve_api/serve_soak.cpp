// `serve_soak`: a bounded soak test of the server at twice its capacity.
//
//   serve_soak --server PATH/serve_test_server [--duration SECONDS] [--clients N]
//
// Starts the server as a child process with a small KV cache and queue, then runs
// N client threads (default: twice running + queued capacity) for the duration,
// each looping over a mix of streaming and non-streaming completions and chats,
// clients that hang up mid-stream or stop waiting, and malformed requests. It then
// checks: the server never crashed or answered 5xx; every request was completed,
// refused with 429, or cancelled by its own client; 429s, preemptions and aborts
// really happened; the server's RSS stayed flat after warm-up; and once idle,
// no request is running or waiting and no KV block is held (the server recounts
// every block reference each step, too). CI runs it for a few seconds; run it for
// minutes by hand: serve_soak --server build/release/bin/serve_test_server --duration 300
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/client/openai_client.h"

using distllm::CounterRng;
using distllm::Timer;
using distllm::client::HttpResult;
using distllm::client::OpenAIClient;
using Json = nlohmann::ordered_json;

namespace {

constexpr int kMaxNumSeqs = 8, kMaxQueued = 8;

struct Child {
  pid_t pid = -1;
  int stdin_fd = -1;
  int port = 0;
};

Child start_server(const std::string& path) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) std::exit(3);
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    std::string seqs = std::to_string(kMaxNumSeqs), queued = std::to_string(kMaxQueued);
    execl(path.c_str(), path.c_str(), "--num-blocks", "64", "--block-size", "4", "--max-num-seqs", seqs.c_str(),
          "--max-num-batched-tokens", "32", "--max-queued-requests", queued.c_str(), "--step-delay-ms", "1",
          "--max-context", "256", static_cast<char*>(nullptr));
    std::perror("exec");
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  c.stdin_fd = in[1];
  std::string line;
  char ch;
  while (read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
  close(out[0]);
  if (std::sscanf(line.c_str(), "listening on %d", &c.port) != 1) {
    std::fprintf(stderr, "soak: server did not start (got '%s')\n", line.c_str());
    std::exit(1);
  }
  return c;
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      long v;
      in >> v;
      return v;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

double metric(const std::string& text, const std::string& name) {
  size_t p = text.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  size_t sp = text.find("} ", p);
  return std::atof(text.c_str() + sp + 2);
}

struct Tally {
  std::atomic<long> completed{0}, rejected{0}, cancelled{0}, refused_4xx{0}, anomalies{0};
  std::mutex mu;
  std::vector<std::string> examples;
  void anomaly(const std::string& what) {
    anomalies++;
    std::lock_guard<std::mutex> lock(mu);
    if (examples.size() < 10) examples.push_back(what);
  }
};

std::string prompt_for(CounterRng& rng) {
  static const std::string shared = "You are a soak-test assistant. Answer briefly and politely. ";
  std::string p = rng.below(2) ? shared : "";
  int extra = 1 + static_cast<int>(rng.below(30));
  for (int i = 0; i < extra; ++i) p += static_cast<char>('a' + rng.below(26));
  return p;
}

// Checks a completed stream's chunks: every choice finished exactly once.
bool stream_complete(const std::vector<Json>& chunks, std::string& why) {
  int finishes = 0;
  for (const Json& c : chunks) {
    if (c.contains("error")) {
      why = "error event: " + c.dump();
      return false;
    }
    for (const Json& ch : c["choices"])
      if (!ch["finish_reason"].is_null()) finishes++;
  }
  if (finishes != 1) {
    why = "stream had " + std::to_string(finishes) + " finish reasons";
    return false;
  }
  return true;
}

void client_loop(int id, const std::string& url, double deadline, Tally& t) {
  CounterRng rng(1234, static_cast<uint64_t>(id));
  OpenAIClient client(url, "", 30);
  OpenAIClient impatient(url, "", 0.2);
  bool refused = false;
  auto reject = [&] {
    t.rejected++;
    refused = true;
  };
  while (distllm::now_seconds() < deadline) {
    // A refused client waits a little before trying again, as real ones do.
    if (refused) std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng.below(80)));
    refused = false;
    int action = static_cast<int>(rng.below(100));
    int max_tokens = 5 + static_cast<int>(rng.below(60));
    Json body = {{"model", "test-model"}, {"max_tokens", max_tokens}, {"ignore_eos", rng.below(2) == 0}};
    bool chat = action >= 60 && action < 75;
    if (chat) body["messages"] = Json::array({{{"role", "user"}, {"content", prompt_for(rng)}}});
    else body["prompt"] = prompt_for(rng);
    if (rng.below(2)) body["temperature"] = 0;
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    if (action < 20 || (action >= 80 && action < 85)) {
      // Non-streaming (and sometimes giving up after 0.2 s).
      bool give_up = action >= 80;
      HttpResult r = (give_up ? impatient : client).post(path, body.dump());
      if (r.status == 200) {
        Json j = Json::parse(r.body, nullptr, false);
        if (j.is_object() && j["choices"].size() == 1 && !j["choices"][0]["finish_reason"].is_null()) t.completed++;
        else t.anomaly("bad non-stream body: " + r.body.substr(0, 200));
      } else if (r.status == 429) {
        reject();
      } else if (r.status == 0 && give_up) {
        t.cancelled++;
      } else {
        t.anomaly("non-stream status " + std::to_string(r.status) + " " + r.transport_error + " " + r.body.substr(0, 200));
      }
    } else if (action < 95) {
      // Streaming; actions 85..94 hang up after a few chunks.
      body["stream"] = true;
      bool hang_up = action >= 85;
      int keep = 1 + static_cast<int>(rng.below(4));
      std::vector<Json> chunks;
      bool parse_error = false;
      HttpResult r = client.post_stream(path, body.dump(), [&](const std::string& data) {
        Json j = Json::parse(data, nullptr, false);
        if (j.is_discarded()) parse_error = true;
        chunks.push_back(j);
        return !(hang_up && static_cast<int>(chunks.size()) >= keep);
      });
      std::string why;
      if (r.status == 429) {
        reject();
      } else if (r.cancelled) {
        t.cancelled++;
      } else if (r.status == 200 && r.done && !parse_error && stream_complete(chunks, why)) {
        t.completed++;
      } else {
        t.anomaly("stream status " + std::to_string(r.status) + " done=" + std::to_string(r.done) + " " + why + " " +
                  r.transport_error + " " + r.body.substr(0, 200));
      }
    } else {
      // Malformed: must be refused with a 4xx, never crash anything.
      static const char* bad[] = {"{\"model\": ", "{\"model\":\"test-model\",\"prompt\":\"x\",\"max_tokens\":-1}",
                                  "{\"model\":\"other\",\"prompt\":\"x\"}", "{\"model\":\"test-model\",\"prompt\":[1,999999]}"};
      HttpResult r = client.post("/v1/completions", bad[rng.below(4)]);
      if (r.status >= 400 && r.status < 500 && r.status != 429) t.refused_4xx++;
      else if (r.status == 429) reject();
      else t.anomaly("malformed request got " + std::to_string(r.status));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string server;
  double duration = 8;
  int clients = 2 * (kMaxNumSeqs + kMaxQueued);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--server") server = argv[i + 1];
    else if (a == "--duration") duration = std::atof(argv[i + 1]);
    else if (a == "--clients") clients = std::atoi(argv[i + 1]);
  }
  if (server.empty()) {
    std::fprintf(stderr, "usage: serve_soak --server PATH [--duration S] [--clients N]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  Child child = start_server(server);
  const std::string url = "http://127.0.0.1:" + std::to_string(child.port);
  Tally tally;
  const double start = distllm::now_seconds(), deadline = start + duration;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) threads.emplace_back(client_loop, i, url, deadline, std::ref(tally));

  // RSS: the level after warm-up (30% of the run) against the peak afterwards.
  long warm_rss = -1, peak_after = 0, first_rss = rss_kib(child.pid);
  while (distllm::now_seconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    long rss = rss_kib(child.pid);
    if (rss < 0) break;
    double t = distllm::now_seconds() - start;
    if (t >= 0.3 * duration && warm_rss < 0) warm_rss = rss;
    if (warm_rss >= 0) peak_after = std::max(peak_after, rss);
  }
  for (auto& th : threads) th.join();

  bool ok = true;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "soak FAILED: %s\n", why.c_str());
    ok = false;
  };
  int status = 0;
  if (waitpid(child.pid, &status, WNOHANG) != 0) {
    fail("the server died");
    return 1;
  }
  // Idle: nothing running or waiting, no KV block held.
  OpenAIClient client(url, "", 10);
  std::string metrics;
  Timer idle;
  while (idle.seconds() < 10) {
    metrics = client.get("/metrics").body;
    if (metric(metrics, "distllm:num_requests_running") == 0 && metric(metrics, "distllm:num_requests_waiting") == 0 &&
        metric(metrics, "distllm:kv_cache_usage_perc") == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  double running = metric(metrics, "distllm:num_requests_running"), waiting = metric(metrics, "distllm:num_requests_waiting");
  double usage = metric(metrics, "distllm:kv_cache_usage_perc");
  double preemptions = metric(metrics, "distllm:num_preemptions_total");
  double aborted = metric(metrics, "distllm:request_aborted_total");
  double rejected = metric(metrics, "distllm:request_rejected_total");
  double failed = metric(metrics, "distllm:request_failed_total");
  std::printf("soak: %.0f s, %d clients: %ld completed, %ld rejected (429), %ld cancelled by their client, %ld malformed "
              "refused, %ld anomalies\n",
              duration, clients, tally.completed.load(), tally.rejected.load(), tally.cancelled.load(),
              tally.refused_4xx.load(), tally.anomalies.load());
  std::printf("soak: server: %.0f preemptions, %.0f aborts, %.0f rejections, %.0f failures; idle: running %.0f, waiting "
              "%.0f, kv usage %.3f\n",
              preemptions, aborted, rejected, failed, running, waiting, usage);
  std::printf("soak: server RSS %ld KiB at start, %ld KiB after warm-up, peak %ld KiB after\n", first_rss, warm_rss,
              peak_after);
  for (const auto& e : tally.examples) std::fprintf(stderr, "  anomaly: %s\n", e.c_str());
  if (tally.anomalies > 0) fail("some requests neither completed, nor got 429, nor were cancelled by their client");
  if (client.get("/health").status != 200) fail("/health is not 200 after the soak");
  if (running != 0 || waiting != 0 || usage != 0) fail("the server is not idle with every block free");
  if (failed != 0) fail("the server reported failed requests");
  if (tally.completed == 0 || rejected <= 0 || preemptions <= 0 || aborted <= 0)
    fail("the soak did not exercise completions, 429s, preemptions and aborts");
#if defined(__SANITIZE_ADDRESS__)
  const bool check_rss = false;  // ASan's quarantine holds freed memory: RSS grows by design
#else
  const bool check_rss = true;
#endif
  if (check_rss && warm_rss > 0 && peak_after > warm_rss + std::max(16L * 1024, warm_rss / 5))
    fail("server RSS grew after warm-up: " + std::to_string(warm_rss) + " -> " + std::to_string(peak_after) + " KiB");
  close(child.stdin_fd);  // the server exits when its stdin closes
  waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("the server did not shut down cleanly");
  if (ok) std::printf("soak: passed\n");
  return ok ? 0 : 1;
}
