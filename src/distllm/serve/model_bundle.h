// Everything needed to run a model directory for generation: the weights, the
// tokenizer, and the token ids that end generation. Shared by `distllm serve` and
// `distllm generate`, so both read a directory the same way.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distllm/model/model_weights.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm::serve {

struct ModelBundle {
  // The weights as the directory's files hold them, memory-mapped in their own dtype
  // (map_hf_model): a bf16 checkpoint is never widened to f32 to be served.
  std::shared_ptr<const ModelWeights> weights;
  std::optional<Tokenizer> tokenizer;  // always set by load_model_bundle
  // generation_config.json's eos_token_id (one id or a list, as Llama 3 has), else
  // the tokenizer's end-of-text token. Every one ends generation.
  std::vector<int32_t> eos_ids;
};

// `tokenizer_path` empty: the tokenizer in the model directory.
ModelBundle load_model_bundle(const std::string& model_dir, const std::string& tokenizer_path = "");

// Throws distllm::Error naming --draft-model unless `draft` (the tokenizer of the
// draft model in `draft_dir`) has the same vocabulary as `target`: the same size and
// the same bytes for every token id.
void check_same_tokenizer(const Tokenizer& target, const Tokenizer& draft, const std::string& draft_dir);

// Empty when `other` has the same vocabulary as `serving` (the same size and the
// same bytes for every token id), else the first difference, worded about `other`
// ("its tokenizer has ...").
std::string tokenizer_difference(const Tokenizer& serving, const Tokenizer& other);

// generation_config.json's eos_token_id list (empty when absent).
std::vector<int32_t> generation_eos_ids(const std::string& model_dir);

// tokenizer_config.json's text for `key` ("bos_token", "eos_token"): a string or an
// AddedToken object {"content": ...}; empty when absent.
std::string special_token_text(const std::string& model_dir, const char* key);

}  // namespace distllm::serve
