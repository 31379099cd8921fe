// Test doubles for the serving engine: a byte-level codec. Not part of the product.
#pragma once

#include <string>

#include "distllm/serve/text_codec.h"

namespace distllm::serve::testing {

// Byte-level codec: ids 0..255 are bytes, 256 is "<|endoftext|>" (EOS). Its
// stream decoder is UTF-8 safe: it holds an unfinished character and replaces
// invalid bytes with U+FFFD, like a real byte-level BPE decoder. With a `bos` id,
// encode_prompt puts it before the text (as Llama's tokenizer does); without, it adds
// nothing (as GPT-2's).
class ByteCodec : public TextCodec {
 public:
  static constexpr int32_t kEos = 256;
  explicit ByteCodec(int32_t bos = -1) : bos_(bos) {}
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_prompt(std::string_view text) const override;
  std::string token_bytes(int32_t id) const override;
  std::unique_ptr<TextStreamDecoder> stream_decoder() const override;
  int32_t eos_token_id() const override { return kEos; }
  int vocab_size() const override { return 257; }

 private:
  int32_t bos_;
};

// Decodes a whole id sequence the way the stream decoder would.
std::string decode_all(const TextCodec& codec, const std::vector<int32_t>& ids);

}  // namespace distllm::serve::testing
