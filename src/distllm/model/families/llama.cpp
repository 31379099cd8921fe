// Llama (LlamaForCausalLM): RMSNorm, rotary positions (with any rope_scaling),
// grouped-query attention with separate q/k/v projections ([out, in] Linear
// matrices), a SwiGLU MLP, biases only when attention_bias / mlp_bias say so, an
// untied output head unless tie_word_embeddings says otherwise. Llama 2 and 3.x,
// SmolLM, TinyLlama, DeepSeek-R1-Distill-Llama are this family.
#include <nlohmann/json.hpp>

#include "distllm/model/families/llama_like.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

class Llama final : public llama_like::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kLlama; }
  const char* name() const override { return "llama"; }
  const char* hf_architecture() const override { return "LlamaForCausalLM"; }

  void validate(const ModelConfig& c) const override { llama_like::validate_rotary(c); }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    llama_like::read_shared_fields(j, c, origin);
    // HF's attention_bias puts a bias on all four attention projections.
    c.qkv_bias = c.attn_out_bias = hf_config::get_bool_or(j, "attention_bias", false, origin);
    c.mlp_bias = hf_config::get_bool_or(j, "mlp_bias", false, origin);
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j = shared_hf_json(c);
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
    return j;
  }
};

}  // namespace

const FamilyDef& llama_family() {
  static const Llama family;
  return family;
}

}  // namespace distllm
