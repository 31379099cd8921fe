// What Gemma 2 (Gemma2ForCausalLM) and Gemma 3's text decoder (Gemma3ForCausalLM)
// share, on the Llama lineage's tensors (llama_like.h):
//   - RMSNorm scaled by 1 + w (the stored w is the offset; NormKind::kRmsNormPlusOne),
//     q/k norms included;
//   - "sandwich" norms: post_attention_layernorm normalises the attention output
//     before its residual add, pre_/post_feedforward_layernorm wrap the MLP;
//   - a GeGLU MLP with the tanh GELU (gate|up stored as Llama's);
//   - the embedding multiplied by sqrt(hidden_size), tied head by default;
//   - alternating local (sliding-window) and global attention layers, scores scaled
//     by query_pre_attn_scalar^-1/2 (ModelConfig::layer_attention);
//   - optional soft-capping of attention scores and of the output logits.
// gemma2.cpp and gemma3.cpp say which layers are local and what else is their own.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/model/families/llama_like.h"

namespace distllm::gemma {

class Family : public llama_like::Family {
 public:
  BlockSpec block(const ModelConfig& c) const override;
  void normalize(ModelConfig& c) const override;
  void validate(const ModelConfig& c) const override;
  std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const override;

 protected:
  // Which layers are local when config.json has no layer_types.
  virtual std::vector<bool> default_sliding_layers(int n_layer) const = 0;
  // The fields both share (sizes, activation, windows, soft-capping, ...); the
  // family reads its own around them.
  void read_gemma_fields(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const;
  nlohmann::json gemma_hf_json(const ModelConfig& c) const;
};

}  // namespace distllm::gemma
