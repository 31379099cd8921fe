#include "distllm/serve/detokenizer.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm::serve {

Detokenizer::Detokenizer(std::unique_ptr<TextStreamDecoder> decoder, std::vector<std::string> stop_strings,
                         bool include_stop_in_output)
    : decoder_(std::move(decoder)), stops_(std::move(stop_strings)), include_stop_(include_stop_in_output) {
  for (const auto& s : stops_) DL_CHECK(!s.empty(), "stop strings must not be empty");
}

Detokenizer::Output Detokenizer::push(int32_t token) {
  if (stopped_) return {};
  held_ += decoder_->push(token);
  return release(false);
}

Detokenizer::Output Detokenizer::finish() {
  if (stopped_) return {};
  held_ += decoder_->finish();
  return release(true);
}

Detokenizer::Output Detokenizer::release(bool final) {
  Output out;
  // Earliest stop string occurrence in the unreleased text.
  size_t best = std::string::npos;
  for (size_t i = 0; armed_ && i < stops_.size(); ++i) {
    size_t pos = held_.find(stops_[i]);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      out.stop = stops_[i];
    }
  }
  if (best != std::string::npos) {
    out.text = held_.substr(0, include_stop_ ? best + out.stop.size() : best);
    out.stopped = true;
    stopped_ = true;
    held_.clear();
    emitted_ += out.text;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  if (!final) {
    for (const auto& s : stops_) {
      size_t max_len = std::min(s.size() - 1, held_.size());
      for (size_t len = max_len; len > hold; --len) {
        if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
  }
  out.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  emitted_ += out.text;
  return out;
}

}  // namespace distllm::serve
