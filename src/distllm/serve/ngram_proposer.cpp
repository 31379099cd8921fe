#include "distllm/serve/ngram_proposer.h"

#include <algorithm>

namespace distllm::serve {

std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, const NgramConfig& config, int max_tokens) {
  std::vector<int32_t> draft;
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return draft;
  const int lo = std::max(1, config.min_n);
  for (int n = std::min<int64_t>(config.max_n, len - 1); n >= lo; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // Latest earlier occurrence: start i in [0, len - n - 1], scanned from the end.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[static_cast<size_t>(i)] != suffix[0]) continue;
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      // The continuation starts at i + n <= len - 1, so it has at least one token;
      // an index past the end reads the draft built so far (cycle extension).
      for (int64_t j = 0; j < max_tokens; ++j) {
        int64_t idx = i + n + j;
        draft.push_back(idx < len ? tokens[static_cast<size_t>(idx)] : draft[static_cast<size_t>(idx - len)]);
      }
      return draft;
    }
  }
  return draft;
}

}  // namespace distllm::serve
