// Qwen2 (Qwen2ForCausalLM; Qwen2.5, DeepSeek-R1-Distill-Qwen): the Llama decoder
// with biases on q, k and v (none on the output projection or the MLP). Qwen2's
// sliding-window attention is off in the released models (use_sliding_window false)
// and refused when a config turns it on.
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/model/families/llama_like.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

class Qwen2 final : public llama_like::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kQwen2; }
  const char* name() const override { return "qwen2"; }
  const char* hf_architecture() const override { return "Qwen2ForCausalLM"; }

  void normalize(ModelConfig& c) const override {
    c.qkv_bias = true;
    Family::normalize(c);
  }
  void validate(const ModelConfig& c) const override {
    llama_like::validate_rotary(c);
    DL_CHECK(c.qkv_bias && !c.attn_out_bias && !c.mlp_bias && !c.qk_norm,
             "qwen2 has biases on q, k and v only, and no q/k norms");
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    llama_like::read_shared_fields(j, c, origin);
    DL_CHECK(!hf_config::get_bool_or(j, "use_sliding_window", false, origin),
             "%s: use_sliding_window is not supported for qwen2", origin.c_str());
    c.qkv_bias = true;
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j = shared_hf_json(c);
    j["use_sliding_window"] = false;
    return j;
  }
};

}  // namespace

const FamilyDef& qwen2_family() {
  static const Qwen2 family;
  return family;
}

}  // namespace distllm
