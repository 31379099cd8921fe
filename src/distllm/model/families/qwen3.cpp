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

class Qwen3 final : public llama_like::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kQwen3; }
  const char* name() const override { return "qwen3"; }
  const char* hf_architecture() const override { return "Qwen3ForCausalLM"; }

  BlockSpec block(const ModelConfig& c) const override {
    BlockSpec b = Family::block(c);
    b.qk_norm = true;
    return b;
  }

  void normalize(ModelConfig& c) const override {
    c.qk_norm = true;
    Family::normalize(c);
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
    nlohmann::json j = shared_hf_json(c);
    j["attention_bias"] = c.qkv_bias;
    j["use_sliding_window"] = false;
    return j;
  }
};

}  // namespace

const FamilyDef& qwen3_family() {
  static const Qwen3 family;
  return family;
}

}  // namespace distllm
