// The decoder of the Llama lineage as Hugging Face names it: LlamaForCausalLM and
// the families that copied its shape (Qwen2, Qwen3, Mistral):
//   model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
//   post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head
// with the optional biases (q/k/v, output, MLP) and per-head q/k norms a ModelConfig
// turns on. A family file adds what is its own; nothing here names a family.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/model/family.h"

namespace distllm::llama_like {

std::vector<TensorSpec> embed_tensors(const ModelConfig& c);
std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer);
std::vector<TensorSpec> head_tensors(const ModelConfig& c);

// The fields the lineage shares in config.json: sizes, norms, RoPE (theta and
// rope_scaling), tying and the activation (which must be silu).
void read_shared_fields(const nlohmann::json& j, ModelConfig& c, const std::string& origin);
// The same without the activation (a family with another MLP checks its own).
void read_shared_fields_but_activation(const nlohmann::json& j, ModelConfig& c, const std::string& origin);
void write_shared_fields(const ModelConfig& c, nlohmann::json& j);

// Llama's MLP width when none is given: 2/3 of 4 x width rounded up to 256.
int default_intermediate(int n_embd);
void validate_rotary(const ModelConfig& c);

// What every family of the lineage shares: its blocks (RMSNorm, SwiGLU, rotary
// positions, [out, in] matrices), the default MLP width, the tensors above, and the
// config.json fields every member writes. A family derives from it and says what is
// its own (biases, q/k norms, fused tensors, the fields it refuses).
class Family : public FamilyDef {
 public:
  BlockSpec block(const ModelConfig&) const override {
    return {NormKind::kRmsNorm, MlpKind::kSwiGlu, PositionKind::kRotary, kernels::WeightLayout::kOutIn};
  }
  void normalize(ModelConfig& c) const override {
    if (c.intermediate_size == 0) c.intermediate_size = default_intermediate(c.n_embd);
  }
  std::vector<TensorSpec> embed_tensors(const ModelConfig& c) const override { return llama_like::embed_tensors(c); }
  std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const override {
    return llama_like::layer_tensors(c, layer);
  }
  std::vector<TensorSpec> head_tensors(const ModelConfig& c) const override { return llama_like::head_tensors(c); }

 protected:
  // model_type, architectures and the shared fields; the family adds its own.
  nlohmann::json shared_hf_json(const ModelConfig& c) const {
    nlohmann::json j;
    j["model_type"] = name();
    j["architectures"] = {hf_architecture()};
    write_shared_fields(c, j);
    return j;
  }
};

}  // namespace distllm::llama_like
