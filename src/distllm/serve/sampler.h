// Token sampling from one row of logits. The order of processing is vLLM's:
//   1. the allowed-token mask (structured outputs) and suppressed tokens (min_tokens)
//      set logits to -inf;
//   2. logit_bias is added;
//   3. penalties: repetition (HF/vLLM: prompt and output tokens, divide a positive
//      logit, multiply a negative one), then frequency and presence (OpenAI: output
//      tokens only, logit -= count * frequency + (count > 0) * presence);
//   4. greedy argmax, or temperature, then top-k, top-p and min-p filtering, then one
//      draw.
// Log-probabilities (with top-N alternatives) are of the raw logits, as vLLM reports
// them by default.
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

// The smallest repetition_penalty accepted (by the API and the engine's admission):
// a seen token's positive logit is divided by it, and far below this the quotient
// leaves the float range (1e-300 is 0 as a float: every such logit turns infinite).
inline constexpr float kMinRepetitionPenalty = 1e-6f;

struct SamplingParams {
  float temperature = 1.0f;  // < 1e-5 means greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;         // the engine draws one when the client gives none
  uint64_t seed_stream = 0;  // separates the n choices of one request
  float min_p = 0.0f;        // 0: off; else drop tokens below min_p * the top probability
  float presence_penalty = 0.0f;    // OpenAI, in [-2, 2]
  float frequency_penalty = 0.0f;   // OpenAI, in [-2, 2]
  float repetition_penalty = 1.0f;  // HF/vLLM, > 0; 1: off
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias added to its logit
  int logprobs = -1;         // < 0: none; N >= 0: chosen token plus N alternatives

  bool greedy() const { return temperature < 1e-5f; }
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// What the sampler needs to know about the sequence besides its logits row.
struct SequenceContext {
  std::span<const int32_t> prompt;     // repetition_penalty counts these too
  std::span<const int32_t> generated;  // tokens sampled before this one (penalties)
  // Empty: every token allowed. Else a bitmask (bit i%32 of word i/32 set = token i
  // allowed), e.g. from a grammar; at least one allowed token must be finite.
  std::span<const uint32_t> allowed;
  std::span<const int32_t> suppressed;  // never sampled now (EOS and stop ids under min_tokens)
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
  std::vector<float> processed;  // logits after mask, bias and penalties
  std::vector<int32_t> order;
  std::vector<int32_t> counts;   // per-token occurrence counts for the penalties
};

// Steps 1-3 of the processing order above (mask, suppression, logit_bias,
// penalties), into scratch.processed. Returns the row to sample from: the input
// itself when nothing applies (the common case costs no copy).
std::span<const float> process_logits(std::span<const float> logits, const SamplingParams& params,
                                      const SequenceContext& seq, SamplerScratch& scratch);

// Throws distllm::Error if the logits hold NaN or +inf or no finite value, if the
// mask and suppression leave no finite logit, or if logit_bias and the penalties
// turn a logit into NaN or +inf (a request's error, never a silent wrong token).
// `step` is the number of tokens this request generated before this one (the RNG
// counter).
SampleResult sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t step,
                          SamplerScratch& scratch, const SequenceContext& seq = {});

// Log-softmax of the raw logits (before temperature and filtering): what vLLM
// reports by default as a token's logprob.
TokenLogprob compute_logprobs(std::span<const float> logits, int32_t chosen, int top_n);

}  // namespace distllm::serve
