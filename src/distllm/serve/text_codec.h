// What the serving engine and API need from a tokenizer. The adapter over
// distllm's byte-level BPE tokenizer implements it (tokenizer_codec.h); tests use
// small deterministic codecs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace distllm::serve {

// Turns a stream of token ids into text incrementally.
class TextStreamDecoder {
 public:
  virtual ~TextStreamDecoder() = default;
  // Appends one token and returns the text that became complete: never half a
  // UTF-8 character (bytes of an unfinished character wait for the next token).
  virtual std::string push(int32_t token) = 0;
  // End of stream: whatever is still held, invalid bytes as U+FFFD.
  virtual std::string finish() = 0;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // Text to ids with nothing added around it (Hugging Face's
  // encode(text, add_special_tokens=False)); special tokens written in the text (e.g.
  // "<|endoftext|>") map to their ids. A chat prompt: its template already wrote the
  // BOS and every other marker, so none is added again (as vLLM does).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Hugging Face's default encode(text) (add_special_tokens=True): encode(text)
  // inside whatever the tokenizer adds around a text: BOS for Llama, Gemma and
  // Mistral (the post-processor, or add_bos_token / add_eos_token in
  // tokenizer_config.json), nothing for GPT-2 and Qwen. A completion's text prompt.
  virtual std::vector<int32_t> encode_prompt(std::string_view text) const = 0;
  // The raw bytes one token stands for (may be part of a UTF-8 character).
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual std::unique_ptr<TextStreamDecoder> stream_decoder() const = 0;
  // End-of-sequence token, or -1 when the tokenizer has none.
  virtual int32_t eos_token_id() const = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace distllm::serve
