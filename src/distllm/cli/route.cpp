// `distllm route`: the OpenAI-compatible gateway in front of serving replicas
// (router/proxy.h).
//
//   distllm route --replica http://127.0.0.1:8001 --replica http://127.0.0.1:8002
//                 --policy cache_aware --port 8000
//   distllm route --launch 2 --model runs/tiny/model          (starts the replicas itself)
//   distllm route --replica ... --split chat=gpt2-v1:90,gpt2-v2:10   (canary)
#include <atomic>
#include <chrono>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/cli/command.h"
#include "distllm/cli/http_edge_flags.h"
#include "distllm/router/config_file.h"
#include "distllm/router/proxy.h"
#include "distllm/router/replica_launcher.h"

namespace distllm {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }  // only a flag: a watcher thread stops the router

int run_route(Args& args) {
  router::RouterConfig c;
  c.replicas = args.get_list("replica", "a replica's base URL, http://host:port (repeatable)");
  c.prefill_replicas = args.get_list(
      "prefill", "a prefill replica's base URL (repeatable; `distllm serve --role prefill`): the --replica URLs are then "
                 "decode replicas (`--role decode`) told where to pull each prompt's KV blocks from");
  c.policy = args.get_string("policy", "least_outstanding",
                             "round_robin | least_outstanding | power_of_two | consistent_hash | cache_aware");
  const std::vector<std::string> splits = args.get_list(
      "split", "alias=model:weight,model:weight: requests for `alias` go to those models by weight (repeatable)");
  const std::string config_file = args.get_string("config", "", "JSON file with replicas, policy and splits");
  router::LaunchConfig launch;
  launch.count = static_cast<int>(args.get_int("launch", 0, "start this many local `distllm serve` replicas"));
  const std::string model = args.get_string("model", "", "with --launch: the model directory the replicas serve");
  const int replica_threads = static_cast<int>(
      args.get_int("replica-threads", 0, "with --launch: threads per replica (0: the cores shared out)"));
  const std::string serve_args = args.get_string(
      "serve-args", "", "with --launch: more `distllm serve` flags for every replica, space-separated "
      "(--serve-args=\"--kv-cache-memory 0.5 ...\")");
  launch.log_dir = args.get_string("log-dir", "route_logs", "with --launch: where replica_<i>.log go");
  c.host = args.get_string("host", "127.0.0.1", "address to bind");
  c.port = static_cast<int>(args.get_int("port", 8000, "port (0: any free port)"));
  c.api_key = args.get_string("api-key", "", "require `Authorization: Bearer KEY` on /v1/* (independent of the replicas')");
  c.http = read_http_edge_flags(args, c.http);
  c.max_attempts = static_cast<int>(args.get_int("max-attempts", 3, "replicas tried per request"));
  c.http.workers = static_cast<int>(args.get_int("threads", 64, "requests answered at once (a stream holds one while it lasts)"));
  c.replica.health_interval_s = args.get_double("health-interval", 1.0, "seconds between active /health checks");
  c.replica.health_timeout_s = args.get_double(
      "health-timeout", 2.0, "seconds a replica gets to answer a health check; past them it takes no requests");
  c.replica.failure_threshold = static_cast<int>(args.get_int("failure-threshold", 3, "consecutive failures that open a replica's breaker"));
  c.replica.open_seconds = args.get_double("breaker-open", 5.0, "seconds an open breaker waits before a half-open probe");
  if (args.help_or_finish()) return 0;
  for (const std::string& spec : splits) router::add_split_flag(c.splits, spec);
  if (!config_file.empty()) router::apply_config_file(config_file, c);
  std::unique_ptr<router::ReplicaLauncher> launcher;
  if (launch.count > 0) {
    DL_CHECK(!model.empty(), "--launch needs --model DIR");
    launch.exe = std::filesystem::read_symlink("/proc/self/exe").string();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = replica_threads > 0 ? replica_threads : std::max(1, cores / launch.count);
    launch.serve_args = {"--model", model, "--threads", std::to_string(threads)};
    for (const std::string& a : split(serve_args, ' '))
      if (!a.empty()) launch.serve_args.push_back(a);
    launcher = std::make_unique<router::ReplicaLauncher>(launch);
    LOG_INFO("route: starting %d replicas of %s, %d threads each (logs in %s)", launch.count, model.c_str(), threads,
             launch.log_dir.c_str());
    for (std::string& url : launcher->start()) c.replicas.push_back(std::move(url));
    launcher->supervise();
  } else {
    DL_CHECK(model.empty() && serve_args.empty() && replica_threads == 0,
             "--model, --serve-args and --replica-threads are for --launch");
  }
  DL_CHECK(!c.replicas.empty(), "give at least one --replica URL (or --launch N --model DIR)");
  DL_CHECK(c.port >= 0 && c.port <= 65535, "--port must be in [0, 65535], got %d", c.port);
  DL_CHECK(c.http.workers >= 1, "--threads must be at least 1");
  check_http_edge_flags(c.http, "route");
  router::Router r(c);
  const int port = r.bind();
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  LOG_INFO("route: %zu replicas, policy %s", c.replicas.size(), c.policy.c_str());
  if (!c.prefill_replicas.empty()) LOG_INFO("route: %zu prefill replicas (prefill/decode disaggregation)", c.prefill_replicas.size());
  std::printf("listening on http://%s:%d\n", c.host.c_str(), port);
  std::fflush(stdout);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load() && !g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    r.stop();
  });
  r.serve();
  done.store(true);
  watcher.join();
  if (launcher) launcher->stop();
  LOG_INFO("route: stopped");
  return 0;
}

DISTLLM_REGISTER_COMMAND("route", "OpenAI-compatible gateway across serving replicas (policies, health, retries)", run_route);

}  // namespace
}  // namespace distllm
