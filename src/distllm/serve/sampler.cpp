#include "distllm/serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"

namespace distllm::serve {
namespace {

// Larger value first; equal values by lower id, so every order is deterministic.
struct ByValueDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

// A row may hold -inf (a token the model rules out) but never NaN or +inf: the
// softmax of a row with +inf is NaN everywhere, and the draw would then fall
// silently on the last candidate.
void check_finite(std::span<const float> logits) {
  DL_CHECK(!logits.empty(), "sampler got an empty logits row");
  constexpr float kInf = std::numeric_limits<float>::infinity();
  bool any_finite = false;
  for (float x : logits) {
    DL_CHECK(!std::isnan(x), "model produced NaN logits");
    DL_CHECK(x != kInf, "model produced +inf logits");
    any_finite = any_finite || std::isfinite(x);
  }
  DL_CHECK(any_finite, "model produced no finite logit");
}

}  // namespace

TokenLogprob compute_logprobs(std::span<const float> logits, int32_t chosen, int top_n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob out;
  out.token = chosen;
  out.logprob = static_cast<float>(logits[static_cast<size_t>(chosen)] - lse);
  size_t n = std::min(static_cast<size_t>(std::max(top_n, 0)), logits.size());
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), ByValueDesc{logits.data()});
    for (size_t i = 0; i < n; ++i)
      out.top.emplace_back(ids[i], static_cast<float>(logits[static_cast<size_t>(ids[i])] - lse));
  }
  return out;
}

namespace {

bool allowed_by_mask(std::span<const uint32_t> mask, size_t id) {
  return (mask[id / 32] >> (id % 32)) & 1u;
}

}  // namespace

std::span<const float> process_logits(std::span<const float> logits, const SamplingParams& params,
                                      const SequenceContext& seq, SamplerScratch& scratch) {
  const size_t vocab = logits.size();
  const bool masked = !seq.allowed.empty();
  if (!masked && seq.suppressed.empty() && params.logit_bias.empty() && !params.has_penalties()) return logits;
  DL_CHECK(!masked || seq.allowed.size() * 32 >= vocab, "allowed-token mask has %zu words, vocabulary needs %zu",
           seq.allowed.size(), (vocab + 31) / 32);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float>& out = scratch.processed;
  out.assign(logits.begin(), logits.end());
  if (masked)
    for (size_t i = 0; i < vocab; ++i)
      if (!allowed_by_mask(seq.allowed, i)) out[i] = kNegInf;
  for (int32_t id : seq.suppressed)
    if (id >= 0 && static_cast<size_t>(id) < vocab) out[static_cast<size_t>(id)] = kNegInf;
  for (const auto& [id, bias] : params.logit_bias) {
    DL_CHECK(id >= 0 && static_cast<size_t>(id) < vocab, "logit_bias names token %d outside the vocabulary of %zu",
             id, vocab);
    out[static_cast<size_t>(id)] += bias;
  }
  if (params.has_penalties()) {
    // Occurrence counts of the generated tokens; the prompt's tokens only mark
    // "seen" for the repetition penalty (-1 = seen in the prompt only).
    std::vector<int32_t>& counts = scratch.counts;
    counts.assign(vocab, 0);
    for (int32_t id : seq.generated)
      if (id >= 0 && static_cast<size_t>(id) < vocab) ++counts[static_cast<size_t>(id)];
    if (params.repetition_penalty != 1.0f) {
      const float r = params.repetition_penalty;
      auto penalize = [&](size_t id) { out[id] = out[id] > 0.0f ? out[id] / r : out[id] * r; };
      for (size_t id = 0; id < vocab; ++id)
        if (counts[id] > 0) penalize(id);
      for (int32_t id : seq.prompt) {
        if (id < 0 || static_cast<size_t>(id) >= vocab) continue;
        const size_t u = static_cast<size_t>(id);
        if (counts[u] == 0) {
          penalize(u);
          counts[u] = -1;  // penalized once, however often the prompt repeats it
        }
      }
    }
    if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
      for (size_t id = 0; id < vocab; ++id) {
        if (counts[id] <= 0) continue;
        out[id] -= static_cast<float>(counts[id]) * params.frequency_penalty + params.presence_penalty;
      }
    }
  }
  bool any_finite = false;
  for (size_t i = 0; i < vocab; ++i) {
    const float x = out[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
      throw Error(strprintf("the sampling parameters made the logit of token %zu %s (repetition_penalty %g, "
                            "frequency_penalty %g, presence_penalty %g, logit_bias): they must keep logits finite",
                            i, std::isnan(x) ? "NaN" : "+inf", static_cast<double>(params.repetition_penalty),
                            static_cast<double>(params.frequency_penalty),
                            static_cast<double>(params.presence_penalty)));
    }
    any_finite = any_finite || std::isfinite(x);
  }
  DL_CHECK(any_finite, "no token is allowed: the mask, suppressed tokens and logit_bias left no finite logit");
  return out;
}

SampleResult sample_token(std::span<const float> raw_logits, const SamplingParams& params, uint64_t step,
                          SamplerScratch& scratch, const SequenceContext& seq) {
  check_finite(raw_logits);
  const std::span<const float> logits = process_logits(raw_logits, params, seq, scratch);
  SampleResult result;
  const size_t vocab = logits.size();
  if (params.greedy()) {
    result.token = argmax(logits);
  } else {
    // Candidates: every id, or the top-k by logit (sorted, most likely first).
    std::vector<int32_t>& order = scratch.order;
    order.resize(vocab);
    for (size_t i = 0; i < vocab; ++i) order[i] = static_cast<int32_t>(i);
    size_t count = vocab;
    if (params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab) {
      count = static_cast<size_t>(params.top_k);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
                        ByValueDesc{logits.data()});
    }
    // Softmax of logits / temperature over the candidates (indexed by token id).
    // A -inf logit (masked) gets probability 0.
    std::vector<float>& probs = scratch.probs;
    probs.assign(vocab, 0.0f);
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < count; ++i) mx = std::max(mx, logits[static_cast<size_t>(order[i])]);
    const float inv_t = 1.0f / params.temperature;
    double total = 0.0;
    for (size_t i = 0; i < count; ++i) {
      size_t id = static_cast<size_t>(order[i]);
      probs[id] = std::exp((logits[id] - mx) * inv_t);
      total += probs[id];
    }
    // Min-p: drop every candidate below min_p times the most likely one's
    // probability (the most likely has exp(0) = 1 after the shift by mx).
    if (params.min_p > 0.0f) {
      const float floor_p = params.min_p;
      size_t kept = 0;
      total = 0.0;
      for (size_t i = 0; i < count; ++i) {
        const size_t id = static_cast<size_t>(order[i]);
        if (probs[id] >= floor_p) {
          order[kept++] = order[i];
          total += probs[id];
        } else {
          probs[id] = 0.0f;
        }
      }
      count = kept;
    }
    // Top-p: the smallest most-likely-first prefix whose mass reaches top_p. Sort
    // lazily in growing windows: peaked distributions never need a full sort.
    if (params.top_p < 1.0f) {
      const double want = static_cast<double>(params.top_p) * total;
      ByValueDesc by_prob{probs.data()};
      size_t window = std::min<size_t>(count, 64);
      size_t kept = count;
      while (true) {
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(window),
                          order.begin() + static_cast<std::ptrdiff_t>(count), by_prob);
        double cum = 0.0;
        size_t i = 0;
        for (; i < window; ++i) {
          cum += probs[static_cast<size_t>(order[i])];
          if (cum >= want) break;
        }
        if (i < window) {
          kept = i + 1;
          break;
        }
        if (window == count) break;
        window = std::min(count, window * 4);
      }
      count = kept;
      total = 0.0;
      for (size_t i = 0; i < count; ++i) total += probs[static_cast<size_t>(order[i])];
    }
    CounterRng rng(params.seed, params.seed_stream, step);
    const double target = rng.uniform_double() * total;
    double cum = 0.0;
    result.token = order[count - 1];
    for (size_t i = 0; i < count; ++i) {
      cum += probs[static_cast<size_t>(order[i])];
      if (cum > target) {
        result.token = order[i];
        break;
      }
    }
  }
  if (params.logprobs >= 0) {
    result.has_logprobs = true;
    result.logprobs = compute_logprobs(raw_logits, result.token, params.logprobs);
  }
  return result;
}

}  // namespace distllm::serve
