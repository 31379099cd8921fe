// The serving load generator behind `distllm bench serve`: synthetic requests
// with controlled input and output lengths against any OpenAI-compatible server,
// streamed, timed at the client.
//
// Input length: completions send the prompt as token ids (exact length, any
// server that accepts token-id prompts as OpenAI's API does); chat (or
// --prompt-format text) sends words that are one GPT-2 token each, so lengths are
// exact for GPT-2-vocabulary models and close for others. The server's own
// usage.prompt_tokens is recorded when it reports it. A shared-prefix fraction f
// makes the first round(f * input_len) tokens identical across requests.
// Output length: max_tokens = output_len with "ignore_eos": true (honoured by
// distllm and vLLM), so every request generates exactly output_len tokens.
// Arrivals: Poisson at request_rate (exponential gaps from a seeded counter RNG),
// or all at once (rate inf); max_concurrency caps requests in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "distllm/client/bench_stats.h"

namespace distllm::client {

struct LoadConfig {
  std::string base_url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;  // empty: the first model GET /v1/models lists
  bool chat = false;
  bool text_prompts = false;  // completions only: words instead of token ids
  int num_prompts = 100;
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;  // 0: unlimited
  int input_len = 256;
  int output_len = 64;
  double shared_prefix_fraction = 0.0;
  // Tenants: each request's shared prefix is one of this many (chosen at random per
  // request), e.g. 8 system prompts. 1: one prefix shared by all.
  int prefix_groups = 1;
  int32_t token_id_lo = 1000, token_id_hi = 30000;  // random prompt ids come from [lo, hi)
  uint64_t seed = 0;
  bool ignore_eos = true;
  double temperature = 0.0;
  // Fields merged into every request body (e.g. {"guided_json": {...}}); an object.
  std::string extra_body_json;
  double timeout_seconds = 600.0;
};

struct LoadResult {
  std::string model;
  std::vector<RequestRecord> records;
  double duration = 0.0;
};

// The request body for request i (exposed for tests).
std::string load_request_body(const LoadConfig& config, const std::string& model, int index);

// Runs the benchmark. Throws distllm::Error if the server cannot be reached or
// its first (test) request fails.
LoadResult run_load(const LoadConfig& config, const std::function<void(int done)>& progress = nullptr);

}  // namespace distllm::client
