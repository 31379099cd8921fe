// N-gram (prompt lookup) proposer for speculative decoding, after vLLM's
// prompt_lookup: the draft for a sequence is what followed the most recent earlier
// occurrence of its longest suffix n-gram.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace distllm::serve {

struct NgramConfig {
  int min_n = 2;  // shortest suffix n-gram to look up (vLLM's prompt_lookup_min)
  int max_n = 4;  // longest (prompt_lookup_max); tried first
};

// Proposes up to `max_tokens` draft tokens to follow `tokens` (prompt + generated).
// For n from max_n down to min_n: find the latest start i < len - n with
// tokens[i, i+n) == tokens[len-n, len); the draft is the tokens after it,
// tokens[i+n, ...). If that run reaches the end of the sequence before max_tokens,
// it continues through the draft itself (a repeating cycle is extended). Returns
// an empty draft when no n-gram recurs or max_tokens <= 0.
std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, const NgramConfig& config, int max_tokens);

}  // namespace distllm::serve
