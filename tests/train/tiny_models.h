// Small models and a learnable token stream shared by the training tests.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/model/config.h"
#include "distllm/train/dataset.h"

namespace distllm::testing {

// 2 layers, 4 heads (llama: 2 key/value heads), vocabulary 64; gpt2 ties the head.
inline ModelConfig tiny(ModelFamily family, int n_embd = 32) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = family == ModelFamily::kGpt2 ? 4 : 2, c.n_embd = n_embd;
  c.vocab_size = 64, c.max_position = 64, c.tie_embeddings = family == ModelFamily::kGpt2;
  c.normalize();
  return c;
}

// A periodic pattern over 64 tokens: a model can learn it in a few dozen steps.
inline TokenDataset pattern_data(int n) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint32_t>((i * 7 + i / 5) % 64);
  return TokenDataset::from_tokens(t, 64, "pattern");
}

// Fixed tokens and targets for n positions (any batch x seq with n = B * T).
inline void fixed_batch(size_t n, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  tokens.resize(n);
  targets.resize(n);
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>((i * 13) % 64);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % 64);
  }
}

}  // namespace distllm::testing
