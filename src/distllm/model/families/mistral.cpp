// Mistral (MistralForCausalLM; Mistral-7B v0.1-v0.3, Mistral-Nemo, Ministral): the
// Llama decoder without biases, whose attention may be windowed: with
// `sliding_window` shorter than the context every layer's query sees only the last
// sliding_window keys, itself included (as transformers' mask and vLLM do), in
// training, prefill and decode; the serving cache then frees the blocks that lie
// wholly before every sequence's window. null (v0.2 on): no window.
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/model/families/llama_like.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

class Mistral final : public llama_like::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kMistral; }
  const char* name() const override { return "mistral"; }
  const char* hf_architecture() const override { return "MistralForCausalLM"; }

  void validate(const ModelConfig& c) const override {
    llama_like::validate_rotary(c);
    DL_CHECK(!c.qkv_bias && !c.attn_out_bias && !c.mlp_bias && !c.qk_norm, "mistral has no biases and no q/k norms");
    DL_CHECK(c.sliding_layers.empty(), "mistral windows every layer or none");
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    llama_like::read_shared_fields(j, c, origin);
    for (const char* field : {"attention_bias", "mlp_bias"})
      DL_CHECK(!hf_config::get_bool_or(j, field, false, origin), "%s: %s is not supported for mistral",
               origin.c_str(), field);
    c.sliding_window = hf_config::get_int_or(j, "sliding_window", 0, ModelConfig::kMaxPositions, origin);
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j = shared_hf_json(c);
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
    return j;
  }
};

}  // namespace

const FamilyDef& mistral_family() {
  static const Mistral family;
  return family;
}

}  // namespace distllm
