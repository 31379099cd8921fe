#include "distllm/serve/tokenizer_codec.h"

namespace distllm::serve {
namespace {

class Decoder : public TextStreamDecoder {
 public:
  // Generated tokens continue the prompt: a SentencePiece "▁Paris" streams as " Paris".
  explicit Decoder(const Tokenizer& tok) : tok_(tok), inner_(tok, /*skip_special=*/true, /*at_text_start=*/false) {}
  std::string push(int32_t id) override {
    if (id < 0 || id >= tok_.vocab_size()) return {};
    return inner_.push(id);
  }
  std::string finish() override { return inner_.flush(); }

 private:
  const Tokenizer& tok_;
  IncrementalDecoder inner_;
};

}  // namespace

std::string TokenizerCodec::token_bytes(int32_t id) const {
  if (id < 0 || id >= tok_.vocab_size()) return {};
  return tok_.token_bytes(id);
}

std::unique_ptr<TextStreamDecoder> TokenizerCodec::stream_decoder() const { return std::make_unique<Decoder>(tok_); }

}  // namespace distllm::serve
