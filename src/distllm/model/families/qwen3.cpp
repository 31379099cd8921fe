// Qwen3 (Qwen3ForCausalLM): the Llama decoder with an RMSNorm over each head of q
// and of k (weights [head_dim], shared by the heads) before the rotation, and a
// head_dim of its own (the attention width need not be the model width). No biases
// unless attention_bias says so; sliding-window attention refused when turned on.
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/model/families/llama_like.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

class Qwen3 final : public FamilyDef {
 public:
  ModelFamily id() const override { return ModelFamily::kQwen3; }
  const char* name() const override { return "qwen3"; }
  const char* hf_architecture() const override { return "Qwen3ForCausalLM"; }

  BlockSpec block(const ModelConfig&) const override {
    BlockSpec b{NormKind::kRmsNorm, MlpKind::kSwiGlu, PositionKind::kRotary, kernels::WeightLayout::kOutIn};
    b.qk_norm = true;
    return b;
  }

  void normalize(ModelConfig& c) const override {
    c.qk_norm = true;
    if (c.intermediate_size == 0) c.intermediate_size = llama_like::default_intermediate(c.n_embd);
  }
  void validate(const ModelConfig& c) const override {
    llama_like::validate_rotary(c);
    DL_CHECK(c.qk_norm && !c.mlp_bias, "qwen3 has q/k norms and no MLP biases");
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    llama_like::read_shared_fields(j, c, origin);
    DL_CHECK(!hf_config::get_bool_or(j, "use_sliding_window", false, origin),
             "%s: use_sliding_window is not supported for qwen3", origin.c_str());
    c.qkv_bias = c.attn_out_bias = hf_config::get_bool_or(j, "attention_bias", false, origin);
    c.qk_norm = true;
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j;
    j["model_type"] = "qwen3";
    j["architectures"] = {hf_architecture()};
    llama_like::write_shared_fields(c, j);
    j["attention_bias"] = c.qkv_bias;
    j["use_sliding_window"] = false;
    return j;
  }

  std::vector<TensorSpec> embed_tensors(const ModelConfig& c) const override { return llama_like::embed_tensors(c); }
  std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const override {
    return llama_like::layer_tensors(c, layer);
  }
  std::vector<TensorSpec> head_tensors(const ModelConfig& c) const override { return llama_like::head_tensors(c); }
};

}  // namespace

const FamilyDef& qwen3_family() {
  static const Qwen3 family;
  return family;
}

}  // namespace distllm
