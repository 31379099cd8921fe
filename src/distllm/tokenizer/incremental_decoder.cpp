#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/tokenizer_impl.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool skip_special, bool at_text_start)
    : tok_(&tok),
      skip_special_(skip_special),
      started_(!at_text_start),
      strip_left_(at_text_start ? tok.impl_->decoder->ends().start : 0) {}

std::string IncrementalDecoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  const TokenizerImpl& t = *tok_->impl_;
  const Decoder& decoder = *t.decoder;
  if (!decoder.by_token()) {
    // A later token may change how earlier ones read (e.g. BPEDecoder's last token):
    // such text is decoded whole when the stream ends.
    (void)tok_->token_bytes(id);  // range check
    ids_.push_back(id);
    return {};
  }
  std::string text = started_ ? tok_->token_bytes(id) : decoder.token_text(tok_->id_to_token(id), /*first=*/true);
  started_ = true;
  const Decoder::Ends& ends = decoder.ends();
  if (!ends.strip.empty()) {
    // The decoder strips up to ends.start of these characters from the start of the
    // text and up to ends.stop from its end: the end is held back until more follows.
    size_t begin = 0;
    while (strip_left_ > 0 && text.compare(begin, ends.strip.size(), ends.strip) == 0) {
      begin += ends.strip.size();
      --strip_left_;
    }
    text.erase(0, begin);
    if (!text.empty()) strip_left_ = 0;
    if (ends.stop > 0) {
      text.insert(0, held_);
      held_.clear();
      size_t end = text.size(), count = 0;
      while (count < ends.stop && end >= ends.strip.size() &&
             text.compare(end - ends.strip.size(), ends.strip.size(), ends.strip) == 0) {
        end -= ends.strip.size();
        ++count;
      }
      held_ = text.substr(end);
      text.resize(end);
    }
  }
  pending_ += text;
  return complete_characters();
}

// Emits every complete character; bytes that can never become one are emitted as
// U+FFFD right away; only an unfinished character at the end waits for more.
std::string IncrementalDecoder::complete_characters() {
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
  if (!ids_.empty()) {
    pending_ += tok_->decode(ids_, skip_special_);
    ids_.clear();
  }
  // Characters held back at the end are the ones the decoder strips there.
  held_.clear();
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace distllm
