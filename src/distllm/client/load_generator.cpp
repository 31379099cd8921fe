#include "distllm/client/load_generator.h"

#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/client/openai_client.h"

namespace distllm::client {
namespace {

using Json = nlohmann::ordered_json;

// Common English words that GPT-2's BPE encodes as one token each (leading space).
const char* const kWords[] = {
    " the",  " of",    " and",  " to",    " in",    " is",   " that",  " for",  " it",    " as",   " was",
    " with", " be",    " by",   " on",    " not",   " he",   " this",  " are",  " or",    " his",  " from",
    " at",   " which", " but",  " have",  " an",    " had",  " they",  " you",  " were",  " their", " one",
    " all",  " we",    " can",  " her",   " has",   " there", " been", " if",   " more",  " when", " will",
    " would", " who",  " so",   " no",    " time",  " new",  " people", " year", " world", " good", " day",
    " water", " house", " city", " small", " large", " work", " music", " light", " story"};
constexpr uint64_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::vector<int32_t> prompt_ids(const LoadConfig& c, int index) {
  int shared = static_cast<int>(std::lround(c.shared_prefix_fraction * c.input_len));
  // Streams: 0 (and 2^40 + g for tenant g > 0) for the shared prefixes, index + 1
  // for each request's own tokens.
  const uint64_t group = c.prefix_groups > 1
                             ? CounterRng(c.seed, uint64_t{1} << 41, static_cast<uint64_t>(index)).below(static_cast<uint64_t>(c.prefix_groups))
                             : 0;
  CounterRng common(c.seed, group == 0 ? 0 : (uint64_t{1} << 40) + group), own(c.seed, static_cast<uint64_t>(index) + 1);
  const uint64_t span = static_cast<uint64_t>(c.token_id_hi - c.token_id_lo);
  std::vector<int32_t> ids;
  for (int i = 0; i < c.input_len; ++i) {
    CounterRng& r = i < shared ? common : own;
    ids.push_back(c.token_id_lo + static_cast<int32_t>(r.below(span)));
  }
  return ids;
}

std::string prompt_text(const LoadConfig& c, int index) {
  std::string text;
  for (int32_t id : prompt_ids(c, index)) text += kWords[static_cast<uint64_t>(id) % kNumWords];
  return text;
}

std::string discover_model(const OpenAIClient& client) {
  HttpResult r = client.get("/v1/models");
  DL_CHECK(r.status == 200, "GET /v1/models failed (%s): %s", r.status ? std::to_string(r.status).c_str() : r.transport_error.c_str(),
           r.body.c_str());
  Json j = Json::parse(r.body, nullptr, false);
  DL_CHECK(j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id"),
           "GET /v1/models returned no model: %s", r.body.c_str());
  return j["data"][0]["id"].get<std::string>();
}

RequestRecord send_one(const OpenAIClient& client, const LoadConfig& c, const std::string& path, const std::string& body,
                       int planned_input) {
  RequestRecord rec;
  rec.input_tokens = planned_input;
  int chunks = 0;
  int usage_out = -1;
  double last = 0.0;
  std::string error;
  const double st = now_seconds();
  HttpResult r = client.post_stream(path, body, [&](const std::string& data) {
    const double now = now_seconds();
    Json j = Json::parse(data, nullptr, false);
    if (!j.is_object()) {
      error = "unparsable event: " + data.substr(0, 200);
      return false;
    }
    if (j.contains("error")) {
      error = j["error"].dump();
      return false;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      usage_out = j["usage"].value("completion_tokens", -1);
      int in = j["usage"].value("prompt_tokens", -1);
      if (in >= 0) rec.input_tokens = in;
    }
    std::string text;
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const Json& ch = j["choices"][0];
      if (c.chat) {
        if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
          text = ch["delta"]["content"].get<std::string>();
      } else if (ch.contains("text") && ch["text"].is_string()) {
        text = ch["text"].get<std::string>();
      }
    }
    if (!text.empty()) {
      if (chunks == 0) rec.ttft = now - st;
      else rec.itls.push_back(now - last);
      last = now;
      ++chunks;
    }
    return true;
  });
  if (r.status != 200) {
    rec.error = r.status ? strprintf("HTTP %d: %s", r.status, r.body.substr(0, 300).c_str()) : r.transport_error;
  } else if (!error.empty()) {
    rec.error = error;
  } else if (!r.done) {
    rec.error = "the stream ended without [DONE]" + (r.transport_error.empty() ? "" : ": " + r.transport_error);
  } else if (chunks == 0) {
    rec.error = "no tokens were streamed";
  } else {
    rec.success = true;
    rec.e2el = last - st;
    rec.output_tokens = usage_out >= 0 ? usage_out : chunks;
  }
  return rec;
}

}  // namespace

std::string load_request_body(const LoadConfig& c, const std::string& model, int index) {
  Json body = {{"model", model}};
  if (c.chat) {
    body["messages"] = Json::array({{{"role", "user"}, {"content", prompt_text(c, index)}}});
  } else if (c.text_prompts) {
    body["prompt"] = prompt_text(c, index);
  } else {
    body["prompt"] = prompt_ids(c, index);
  }
  body["max_tokens"] = c.output_len;
  body["temperature"] = c.temperature;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (c.ignore_eos) body["ignore_eos"] = true;
  if (!c.extra_body_json.empty()) {
    Json extra = Json::parse(c.extra_body_json, nullptr, /*allow_exceptions=*/false);
    DL_CHECK(extra.is_object(), "--extra-body must be a JSON object, got: %s", c.extra_body_json.c_str());
    for (auto& [k, v] : extra.items()) body[k] = v;
  }
  return body.dump();
}

LoadResult run_load(const LoadConfig& c, const std::function<void(int)>& progress) {
  DL_CHECK(c.num_prompts >= 1, "--num-prompts must be at least 1");
  DL_CHECK(c.input_len >= 1 && c.output_len >= 1, "--input-len and --output-len must be at least 1");
  DL_CHECK(c.shared_prefix_fraction >= 0 && c.shared_prefix_fraction <= 1, "--shared-prefix-fraction must be in [0, 1]");
  DL_CHECK(c.prefix_groups >= 1, "--prefix-groups must be at least 1");
  DL_CHECK(c.request_rate > 0, "--request-rate must be positive (or inf)");
  DL_CHECK(c.max_concurrency >= 0, "--max-concurrency must be >= 0");
  DL_CHECK(c.token_id_hi > c.token_id_lo && c.token_id_lo >= 0, "token id range is empty");
  OpenAIClient client(c.base_url, c.api_key, c.timeout_seconds);
  LoadResult result;
  result.model = c.model.empty() ? discover_model(client) : c.model;
  const std::string path = c.chat ? "/v1/chat/completions" : "/v1/completions";

  // One test request first: a wrong model name or URL fails fast and clearly.
  {
    LoadConfig probe = c;
    probe.output_len = std::min(c.output_len, 2);
    RequestRecord r = send_one(client, c, path, load_request_body(probe, result.model, c.num_prompts), c.input_len);
    DL_CHECK(r.success, "the test request to %s%s failed: %s", c.base_url.c_str(), path.c_str(), r.error.c_str());
  }

  std::vector<double> arrival(static_cast<size_t>(c.num_prompts), 0.0);
  if (std::isfinite(c.request_rate)) {
    CounterRng gaps(c.seed, 0xA441);
    double t = 0.0;
    for (auto& a : arrival) {
      a = t;
      t += -std::log(1.0 - gaps.uniform_double()) / c.request_rate;
    }
  }
  const int workers = c.max_concurrency > 0 ? std::min(c.max_concurrency, c.num_prompts) : std::min(c.num_prompts, 512);
  result.records.resize(static_cast<size_t>(c.num_prompts));
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int> ready;
  bool all_queued = false;
  int done = 0;
  const double start = now_seconds();
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      OpenAIClient worker_client(c.base_url, c.api_key, c.timeout_seconds);
      while (true) {
        int i;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return !ready.empty() || all_queued; });
          if (ready.empty()) return;
          i = ready.front();
          ready.pop_front();
        }
        RequestRecord rec = send_one(worker_client, c, path, load_request_body(c, result.model, i), c.input_len);
        std::lock_guard<std::mutex> lock(mu);
        result.records[static_cast<size_t>(i)] = std::move(rec);
        ++done;
        if (progress) progress(done);
      }
    });
  }
  for (int i = 0; i < c.num_prompts; ++i) {
    double wait = start + arrival[static_cast<size_t>(i)] - now_seconds();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    {
      std::lock_guard<std::mutex> lock(mu);
      ready.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    all_queued = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  result.duration = now_seconds() - start;
  return result;
}

}  // namespace distllm::client
