// `distllm bench serve`: load-test any OpenAI-compatible server (distllm serve,
// vLLM, llama.cpp, ...) and report throughput and latency as vLLM's `bench serve`
// defines them (docs/serving.md, docs/benchmarks.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/cli/command.h"
#include "distllm/client/bench_stats.h"
#include "distllm/client/load_generator.h"
#include "distllm/client/openai_client.h"

namespace distllm {
namespace {

using client::BenchSummary;
using client::Distribution;
using client::LoadConfig;

nlohmann::ordered_json dist_json(const char* name, const Distribution& d) {
  nlohmann::ordered_json j;
  j[strprintf("mean_%s_ms", name)] = d.mean;
  j[strprintf("median_%s_ms", name)] = d.median;
  j[strprintf("p90_%s_ms", name)] = d.p90;
  j[strprintf("p99_%s_ms", name)] = d.p99;
  return j;
}

// The server's speculative-decoding counters (distllm's or vLLM's spec_decode_*
// names) from GET /metrics; all zero when it has none or the scrape fails.
struct SpecCounters {
  double drafts = 0, draft_tokens = 0, accepted = 0;
};

SpecCounters scrape_spec_counters(const std::string& base_url, const std::string& api_key) {
  SpecCounters c;
  client::HttpResult r = client::OpenAIClient(base_url, api_key, 10.0).get("/metrics");
  if (r.status != 200) return c;
  size_t pos = 0;
  while (pos < r.body.size()) {
    size_t end = r.body.find('\n', pos);
    if (end == std::string::npos) end = r.body.size();
    std::string line = r.body.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    double v = std::strtod(line.c_str() + space + 1, nullptr);
    auto is = [&](const char* name) { return line.find(name) != std::string::npos; };
    if (is("spec_decode_num_drafts_total")) c.drafts += v;
    else if (is("spec_decode_num_draft_tokens_total")) c.draft_tokens += v;
    else if (is("spec_decode_num_accepted_tokens_total")) c.accepted += v;
  }
  return c;
}

int run_bench_serve(Args& args) {
  LoadConfig c;
  std::string host = args.get_string("host", "127.0.0.1", "server host");
  int64_t port = args.get_int("port", 8000, "server port");
  std::string base_url = args.get_string("base-url", "", "server URL, e.g. http://127.0.0.1:8000 (overrides --host/--port)");
  c.api_key = args.get_string("api-key", "", "Bearer token to send");
  c.model = args.get_string("model", "", "model name (default: the first one /v1/models lists)");
  std::string endpoint = args.get_string("endpoint", "completions", "completions or chat");
  std::string prompt_format = args.get_string("prompt-format", "tokens", "completions prompts as 'tokens' (exact lengths) or 'text'");
  c.num_prompts = static_cast<int>(args.get_int("num-prompts", 100, "requests to send"));
  std::string rate = args.get_string("request-rate", "inf", "requests per second, Poisson arrivals; inf sends all at once");
  c.max_concurrency = static_cast<int>(args.get_int("max-concurrency", 0, "most requests in flight (0: unlimited)"));
  c.input_len = static_cast<int>(args.get_int("input-len", 256, "prompt tokens per request"));
  c.output_len = static_cast<int>(args.get_int("output-len", 64, "generated tokens per request (max_tokens with ignore_eos)"));
  c.shared_prefix_fraction = args.get_double("shared-prefix-fraction", 0.0, "fraction of each prompt shared by all requests");
  c.prefix_groups = static_cast<int>(args.get_int("prefix-groups", 1, "distinct shared prefixes (tenants); each request draws one"));
  c.seed = static_cast<uint64_t>(args.get_int("seed", 0, "seed for prompts and arrival times"));
  c.temperature = args.get_double("temperature", 0.0, "sampling temperature sent with each request");
  c.token_id_lo = static_cast<int32_t>(args.get_int("token-id-min", 1000, "smallest random prompt token id"));
  c.token_id_hi = static_cast<int32_t>(args.get_int("token-id-max", 30000, "random prompt token ids stay below this"));
  bool no_ignore_eos = args.get_flag("no-ignore-eos", "let the model stop at EOS (output lengths then vary)");
  c.extra_body_json = args.get_string("extra-body", "", "JSON object merged into every request, e.g. '{\"guided_json\": {...}}'");
  std::vector<std::string> goodput = args.get_list("goodput", "SLOs for goodput: ttft:MS tpot:MS e2el:MS");
  std::string save_json = args.get_string("save-json", "", "write the results (and per-request data) to this JSON file");
  if (args.help_or_finish()) return 0;

  c.base_url = base_url.empty() ? strprintf("http://%s:%lld", host.c_str(), static_cast<long long>(port)) : base_url;
  DL_CHECK(endpoint == "completions" || endpoint == "chat", "--endpoint must be completions or chat, got '%s'", endpoint.c_str());
  DL_CHECK(prompt_format == "tokens" || prompt_format == "text", "--prompt-format must be tokens or text");
  c.chat = endpoint == "chat";
  c.text_prompts = prompt_format == "text";
  c.ignore_eos = !no_ignore_eos;
  if (!c.extra_body_json.empty()) load_request_body(c, "model", 0);  // a bad --extra-body fails here, named
  if (rate == "inf") {
    c.request_rate = std::numeric_limits<double>::infinity();
  } else {
    char* end = nullptr;
    c.request_rate = std::strtod(rate.c_str(), &end);
    DL_CHECK(end && *end == '\0' && c.request_rate > 0 && std::isfinite(c.request_rate),
             "--request-rate must be a positive number or inf, got '%s'", rate.c_str());
  }
  client::Slo slo = client::parse_slo(goodput);

  std::printf("bench serve: %s /v1/%s, %d requests, input %d, output %d, shared prefix %.0f%%, rate %s, max concurrency %s\n",
              c.base_url.c_str(), c.chat ? "chat/completions" : "completions", c.num_prompts, c.input_len, c.output_len,
              100 * c.shared_prefix_fraction, rate.c_str(), c.max_concurrency ? std::to_string(c.max_concurrency).c_str() : "unlimited");
  std::fflush(stdout);
  const SpecCounters spec_before = scrape_spec_counters(c.base_url, c.api_key);
  client::LoadResult result = client::run_load(c);
  BenchSummary s = client::summarize(result.records, result.duration, slo);
  std::fputs(client::format_report(s).c_str(), stdout);
  const SpecCounters spec_after = scrape_spec_counters(c.base_url, c.api_key);
  SpecCounters spec{spec_after.drafts - spec_before.drafts, spec_after.draft_tokens - spec_before.draft_tokens,
                    spec_after.accepted - spec_before.accepted};
  if (spec.drafts > 0) {
    std::printf("%s\n", std::string(50, '-').c_str());
    std::printf("%-40s %.0f\n", "Speculative drafts:", spec.drafts);
    std::printf("%-40s %.0f\n", "Draft tokens proposed:", spec.draft_tokens);
    std::printf("%-40s %.0f\n", "Draft tokens accepted:", spec.accepted);
    std::printf("%-40s %.2f\n", "Draft acceptance rate (%):", 100.0 * spec.accepted / std::max(1.0, spec.draft_tokens));
    std::printf("%-40s %.2f\n", "Mean accepted length (tokens/step):", 1.0 + spec.accepted / spec.drafts);
  }
  size_t shown = 0;
  for (const auto& r : result.records) {
    if (!r.success && shown++ < 5) std::fprintf(stderr, "failed request: %s\n", r.error.c_str());
  }

  if (!save_json.empty()) {
    nlohmann::ordered_json j;
    j["date"] = static_cast<long long>(std::time(nullptr));
    j["base_url"] = c.base_url;
    j["model"] = result.model;
    j["endpoint"] = endpoint;
    j["num_prompts"] = c.num_prompts;
    j["request_rate"] = std::isfinite(c.request_rate) ? nlohmann::ordered_json(c.request_rate) : nlohmann::ordered_json("inf");
    j["max_concurrency"] = c.max_concurrency;
    j["input_len"] = c.input_len;
    j["output_len"] = c.output_len;
    j["shared_prefix_fraction"] = c.shared_prefix_fraction;
    j["completed"] = s.completed;
    j["failed"] = s.failed;
    j["duration"] = s.duration;
    j["total_input_tokens"] = s.input_tokens;
    j["total_output_tokens"] = s.output_tokens;
    j["request_throughput"] = s.request_throughput;
    j["output_throughput"] = s.output_throughput;
    j["total_token_throughput"] = s.total_token_throughput;
    if (spec.drafts > 0) {
      j["spec_decode_num_drafts"] = spec.drafts;
      j["spec_decode_num_draft_tokens"] = spec.draft_tokens;
      j["spec_decode_num_accepted_tokens"] = spec.accepted;
      j["spec_decode_acceptance_rate"] = spec.accepted / std::max(1.0, spec.draft_tokens);
      j["spec_decode_mean_accepted_length"] = 1.0 + spec.accepted / spec.drafts;
    }
    j["request_goodput"] = s.goodput ? nlohmann::ordered_json(*s.goodput) : nlohmann::ordered_json();
    for (auto [name, d] : {std::pair{"ttft", &s.ttft}, {"tpot", &s.tpot}, {"itl", &s.itl}, {"e2el", &s.e2el}}) {
      nlohmann::ordered_json fields = dist_json(name, *d);
      for (auto& [k, v] : fields.items()) j[k] = v;
    }
    auto& per = j["requests"] = nlohmann::ordered_json::array();
    for (const auto& r : result.records) {
      per.push_back({{"success", r.success}, {"input_tokens", r.input_tokens}, {"output_tokens", r.output_tokens},
                     {"ttft", r.ttft}, {"e2el", r.e2el}, {"itls", r.itls}, {"error", r.error}});
    }
    std::ofstream out(save_json);
    DL_CHECK(out.good(), "cannot write %s", save_json.c_str());
    out << j.dump(1) << "\n";
    std::printf("results written to %s\n", save_json.c_str());
  }
  return s.failed == 0 ? 0 : 1;
}

DISTLLM_REGISTER_COMMAND("bench serve", "load-test an OpenAI-compatible server (TTFT, TPOT, ITL, throughput)",
                         run_bench_serve);

}  // namespace
}  // namespace distllm
