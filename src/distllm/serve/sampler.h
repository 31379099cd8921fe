// Token sampling from one row of logits: greedy, temperature, top-k, top-p, and
// log-probabilities with top-N alternatives.
//
// Reproducibility: the random draw for a request's k-th generated token is value k
// of a counter-based stream keyed by (seed, seed_stream) (base/rng.h). It depends on
// nothing else, so a seeded request produces the same tokens whatever else shares
// its batch, whether it was preempted and recomputed, and in any process — given
// the same logits.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace distllm::serve {

struct SamplingParams {
  float temperature = 1.0f;  // < 1e-5 means greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;         // the engine draws one when the client gives none
  uint64_t seed_stream = 0;  // separates the n choices of one request
  int logprobs = -1;         // < 0: none; N >= 0: chosen token plus N alternatives

  bool greedy() const { return temperature < 1e-5f; }
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely first (ties: lower id first)
};

struct SampleResult {
  int32_t token = 0;
  bool has_logprobs = false;
  TokenLogprob logprobs;
};

// Reusable scratch space; one per thread that samples.
struct SamplerScratch {
  std::vector<float> probs;
  std::vector<int32_t> order;
};

// Throws distllm::Error if the logits hold NaN or no finite value.
// `step` is the number of tokens this request generated before this one.
SampleResult sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t step,
                          SamplerScratch& scratch);

// Log-softmax of the raw logits (before temperature and filtering): what vLLM
// reports by default as a token's logprob.
TokenLogprob compute_logprobs(std::span<const float> logits, int32_t chosen, int top_n);

}  // namespace distllm::serve
