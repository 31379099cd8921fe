// Speculative decoding: settings and the verification rule.
//
// A decoding sequence proposes k draft tokens (draft_proposer.h: prompt lookup, or
// a smaller draft model run greedily); the engine runs
// [newest token, d1..dk] as one chunk and gets k + 1 rows of logits: row i is the
// target distribution for the token after d1..di. verify_draft then samples row
// 0, 1, ... in order with the ordinary sampler and accepts while the sampled token
// equals the draft token; the first mismatch is emitted and ends the run; if all k
// are accepted, row k's sample is emitted as the bonus token.
//
// Why this is exact (identical to decoding without speculation): the draft is
// deterministic (q is one-hot on d_i), and the sampler's randomness for a
// sequence's m-th generated token is a counter-based draw keyed by (seed, m),
// independent of everything else. Row i is sampled with step = generated + i and
// with the accepted drafts in the sequence's history (penalties see them), i.e.
// exactly as the non-speculative engine would sample that token given the same
// prefix; the runner's logits are batch- and chunk-invariant, so the logits are the
// same too. Hence each emitted token equals the non-speculative one, for greedy and
// seeded sampling alike. As a distribution this IS speculative rejection sampling
// with a one-hot q: min(1, p(d)/q(d)) = p(d) is the chance the draw equals d
// (accept), and on rejection the emitted token is a draw from p conditioned on
// != d, i.e. p with d removed and renormalized, which is the residual
// norm(max(0, p - q)). So the output follows p whatever the drafts are; they only
// change how many tokens one step yields.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "distllm/serve/ngram_proposer.h"
#include "distllm/serve/sampler.h"

namespace distllm::serve {

enum class SpeculativeMethod { kNone, kNgram, kDraft };

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  int num_speculative_tokens = 4;  // k: draft tokens per step at most
  NgramConfig ngram;
  // > 0: no drafts in a step where more than this many requests are running (vLLM's
  // speculative_disable_by_batch_size): large batches are compute-bound, and every
  // rejected draft costs real work there (docs/benchmarks.md).
  int disable_by_batch_size = 0;

  bool enabled() const { return method != SpeculativeMethod::kNone && num_speculative_tokens > 0; }
  // Throws distllm::Error naming the flag when a setting is out of range.
  void validate() const;
};

// "none", "ngram" or "draft"; throws distllm::Error naming --speculative otherwise.
SpeculativeMethod parse_speculative_method(const std::string& name);

struct VerifyResult {
  std::vector<SampleResult> samples;  // tokens to emit, in order (1 .. k + 1)
  int num_accepted = 0;               // drafts accepted (samples.size() - 1)
};

// Verifies `draft` against k + 1 rows: sample_row(i) must sample row i given that
// draft[0, i) were accepted (step counter generated + i, history including them).
// Without a draft it samples row 0 only: plain decoding.
VerifyResult verify_draft(std::span<const int32_t> draft, const std::function<SampleResult(int row)>& sample_row);

}  // namespace distllm::serve
