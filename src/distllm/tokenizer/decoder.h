// tokenizer.json's "decoder": token strings back to text, as Hugging Face's
// Tokenizer::decode does (its decode_chain, step by step), except that bytes are kept
// as they are: where Hugging Face would make U+FFFD of bytes that are not UTF-8 (a
// ByteLevel or ByteFallback result that ends inside a character), decode returns the
// bytes, so that text split across calls joins up exactly.
//
// Supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder and
// Sequence; no decoder joins the tokens with spaces, as Hugging Face does.
//
// For streaming, the chain is also reduced to "what each token adds" (token_text):
// the first token of a text may differ (Metaspace drops its leading "▁"), and a Strip
// after Fuse trims the ends of the whole text (ends()). Chains that do not reduce to
// that (e.g. a Replace of a multi-character pattern after Fuse) say so
// (by_token() == false) and are streamed by decoding everything again.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/tokenizer/json_reader.h"

namespace distllm {

class DecoderStep;

class Decoder {
 public:
  // tokenizer.json's "decoder" (null: tokens joined with " ").
  static std::unique_ptr<Decoder> parse(const JsonReader& r, const nlohmann::json& node, const std::string& where);
  ~Decoder();

  // The text of these tokens (their string forms: vocab keys or added tokens' contents).
  std::string decode(const std::vector<std::string_view>& tokens) const;

  bool by_token() const { return by_token_; }
  // What token `token` adds to the text, as the first token or as any later one.
  std::string token_text(std::string_view token, bool first) const;
  // Characters removed from the ends of the whole text.
  struct Ends {
    std::string strip;  // the character (UTF-8); empty: none
    size_t start = 0;   // at most this many from the start
    size_t stop = 0;    // ... and from the end
  };
  const Ends& ends() const { return ends_; }

 private:
  Decoder();
  std::vector<std::unique_ptr<DecoderStep>> steps_;
  bool by_token_ = true;
  Ends ends_;
};

}  // namespace distllm
