// Incremental detokenizer with stop strings, one per generated sequence.
//
// Text comes from the tokenizer's stream decoder (UTF-8 safe). Stop strings are
// matched on that text, never on tokens, so a stop string split across tokens is
// still found. Text that could be the beginning of a stop string is held back until
// it is known not to be one, so a matched stop string never leaks to the client:
// the output ends right before it (or right after it, with
// include_stop_str_in_output, vLLM's option).
//
// Stop strings are matched only once armed (min_tokens: vLLM checks them only when
// the output has at least min_tokens tokens). Text is still held back before that,
// so a stop string that began before arming is found once armed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distllm/serve/text_codec.h"

namespace distllm::serve {

class Detokenizer {
 public:
  Detokenizer(std::unique_ptr<TextStreamDecoder> decoder, std::vector<std::string> stop_strings,
              bool include_stop_in_output = false);

  // From now on, stop strings end generation (they are armed from the start unless
  // disarmed).
  void set_stops_armed(bool armed) { armed_ = armed; }

  struct Output {
    std::string text;  // safe to send now
    bool stopped = false;  // a stop string matched; generation must end
    std::string stop;  // which one
  };

  // Feeds one generated token.
  Output push(int32_t token);
  // End of generation without a stop match: releases held text. Also checks stop
  // strings once more on the decoder's final bytes.
  Output finish();

  // Everything released so far.
  const std::string& text() const { return emitted_; }

 private:
  Output release(bool final);

  std::unique_ptr<TextStreamDecoder> decoder_;
  std::vector<std::string> stops_;
  std::string held_;
  std::string emitted_;
  bool include_stop_ = false;
  bool armed_ = true;
  bool stopped_ = false;
};

}  // namespace distllm::serve
