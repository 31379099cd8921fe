#include "distllm/serve/speculative.h"

#include "distllm/base/error.h"

namespace distllm::serve {

void SpeculativeConfig::validate() const {
  if (method == SpeculativeMethod::kNone) return;
  DL_CHECK(num_speculative_tokens >= 1 && num_speculative_tokens <= 64,
           "--num-speculative-tokens must be in [1, 64], got %d", num_speculative_tokens);
  DL_CHECK(ngram.min_n >= 1, "--ngram-min must be at least 1, got %d", ngram.min_n);
  DL_CHECK(disable_by_batch_size >= 0, "--speculative-disable-by-batch-size must not be negative, got %d",
           disable_by_batch_size);
  DL_CHECK(ngram.max_n >= ngram.min_n, "--ngram-max (%d) must be at least --ngram-min (%d)", ngram.max_n, ngram.min_n);
}

SpeculativeMethod parse_speculative_method(const std::string& name) {
  if (name.empty() || name == "none") return SpeculativeMethod::kNone;
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft") return SpeculativeMethod::kDraft;
  throw Error(strprintf("--speculative must be 'none', 'ngram' or 'draft', got '%s'", name.c_str()));
}

VerifyResult verify_draft(std::span<const int32_t> draft, const std::function<SampleResult(int row)>& sample_row) {
  VerifyResult r;
  r.samples.reserve(draft.size() + 1);
  for (size_t i = 0; i <= draft.size(); ++i) {
    r.samples.push_back(sample_row(static_cast<int>(i)));
    // Row draft.size() is the bonus token: always emitted, nothing to compare.
    if (i == draft.size() || r.samples.back().token != draft[i]) break;
    r.num_accepted += 1;
  }
  return r;
}

}  // namespace distllm::serve
