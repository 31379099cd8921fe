#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  // Emit every complete character; bytes that can never become one are emitted as
  // U+FFFD right away; only an unfinished character at the end waits for more.
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  std::string out;
  size_t i = 0, n = pending_.size();
  while (i < n) {
    Utf8Step step = utf8_step(p + i, n - i);
    if (step.kind == Utf8Step::kTruncated) break;
    if (step.kind == Utf8Step::kChar) {
      out.append(pending_, i, step.length);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += step.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace distllm
