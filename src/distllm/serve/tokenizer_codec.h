// TextCodec over distllm's tokenizer (tokenizer/tokenizer.h, tokenizer.json with
// tokenizer_config.json): the engine's view of the model's tokenizer.
#pragma once

#include "distllm/serve/text_codec.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm::serve {

class TokenizerCodec : public TextCodec {
 public:
  explicit TokenizerCodec(Tokenizer tokenizer) : tok_(std::move(tokenizer)) {}

  std::vector<int32_t> encode(std::string_view text) const override { return tok_.encode(text, true); }
  std::vector<int32_t> encode_prompt(std::string_view text) const override {
    return tok_.encode_with_special_tokens(text);
  }
  // Ids past the tokenizer's vocabulary (models often pad their embedding table)
  // stand for no text.
  std::string token_bytes(int32_t id) const override;
  // Special tokens (EOS with ignore_eos, template markers) produce no text; the text
  // continues the prompt's (a SentencePiece "▁Paris" gives " Paris", as vLLM streams).
  std::unique_ptr<TextStreamDecoder> stream_decoder() const override;
  int32_t eos_token_id() const override { return tok_.eos_token_id().value_or(-1); }
  int vocab_size() const override { return tok_.vocab_size(); }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  Tokenizer tok_;
};

}  // namespace distllm::serve
