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
void write_shared_fields(const ModelConfig& c, nlohmann::json& j);

// Llama's MLP width when none is given: 2/3 of 4 x width rounded up to 256.
int default_intermediate(int n_embd);
void validate_rotary(const ModelConfig& c);

}  // namespace distllm::llama_like
