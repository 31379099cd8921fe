// A scripted model for chat tests over real sockets: it answers with the last user
// message of its ChatML prompt, byte by byte (one token per byte with the test's
// ByteCodec), then EOS. A test sends the text it wants "the model" to generate —
// thinking tags, tool calls in each family's format — and checks what the server
// makes of it, streamed (one token per step, so markers arrive split) or whole.
// Like the test runner it keeps its tokens in the paged KV cache and reads them
// back through the block tables. Header-only test double; not part of the product.
#pragma once

#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/model_runner.h"

namespace distllm::serve::testing {

class EchoRunner : public ModelRunner {
 public:
  static constexpr int kVocab = 257;  // ByteCodec: bytes and EOS
  static constexpr int32_t kEos = 256;

  KvGeometry kv_geometry() const override { return {1, 1, 2, 4}; }
  size_t kv_bytes_per_block(int block_size) const override { return static_cast<size_t>(block_size) * 16; }
  void allocate_kv(int num_blocks, int block_size) override {
    block_size_ = block_size;
    slots_.assign(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size), -1);
  }
  int vocab_size() const override { return kVocab; }
  int max_context() const override { return 8192; }

  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override {
    size_t rows = 0;
    for (const auto& c : batch) rows += static_cast<size_t>(c.num_logits);
    logits.assign(rows * kVocab, 0.0f);
    size_t row = 0;
    for (const auto& c : batch) {
      auto slot = [&](int32_t pos) -> int32_t& {
        return slots_[static_cast<size_t>(c.block_table[static_cast<size_t>(pos / block_size_)]) * block_size_ +
                      static_cast<size_t>(pos % block_size_)];
      };
      const int32_t end = c.start_pos + static_cast<int32_t>(c.tokens.size());
      for (int32_t i = 0; i < static_cast<int32_t>(c.tokens.size()); ++i) slot(c.start_pos + i) = c.tokens[static_cast<size_t>(i)];
      for (int32_t p = end - c.num_logits; p < end; ++p) {
        std::string text;
        for (int32_t q = 0; q <= p; ++q) {
          const int32_t t = slot(q);
          DL_CHECK(t >= 0, "echo runner: position %d was never written", q);
          if (t < 256) text += static_cast<char>(t);
        }
        logits[row++ * kVocab + static_cast<size_t>(next_token(text))] = 10.0f;
      }
    }
  }

  // The next token after `text`: the script (the last user message) continues
  // what follows the last "<|im_start|>assistant\n", then EOS.
  static int32_t next_token(const std::string& text) {
    static const std::string kAssistant = "<|im_start|>assistant\n", kUser = "<|im_start|>user\n", kEnd = "<|im_end|>";
    const size_t a = text.rfind(kAssistant);
    if (a == std::string::npos) return kEos;
    const size_t u = text.rfind(kUser, a);
    if (u == std::string::npos) return kEos;
    const size_t body = u + kUser.size();
    const size_t e = text.find(kEnd, body);
    const std::string script = text.substr(body, (e == std::string::npos || e > a ? a : e) - body);
    const std::string said = text.substr(a + kAssistant.size());
    if (said.size() >= script.size() || script.compare(0, said.size(), said) != 0) return kEos;
    return static_cast<unsigned char>(script[said.size()]);
  }

 private:
  int block_size_ = 0;
  std::vector<int32_t> slots_;
};

}  // namespace distllm::serve::testing
