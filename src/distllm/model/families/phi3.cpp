// Phi-3 (Phi3ForCausalLM; Phi-3-mini-128k, Phi-3-medium, Phi-3.5-mini): the Llama
// decoder with q|k|v in one `qkv_proj` matrix and gate|up in one `gate_up_proj`
// (gate first, as transformers' chunk(2) reads it), LongRoPE for the long-context
// models, no biases. The fused matrices are the [rows, in] matrices the graphs
// already read; tensor parallelism takes each rank's heads of q, k and v and its
// hidden units of gate and up out of them (TpSplit::kQkvFused, kGateUpFused).
// Phi-3-mini-4k windows its attention (sliding_window 2047 of a 4096 context, as
// Mistral does); Phi-3.5 and the 128k models set a window past the context: none.
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/families/llama_like.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

using R = TensorRole;
using S = TpSplit;

class Phi3 final : public llama_like::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kPhi3; }
  const char* name() const override { return "phi3"; }
  const char* hf_architecture() const override { return "Phi3ForCausalLM"; }

  void validate(const ModelConfig& c) const override {
    llama_like::validate_rotary(c);
    DL_CHECK(!c.qkv_bias && !c.attn_out_bias && !c.mlp_bias && !c.qk_norm, "phi3 has no biases and no q/k norms");
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    llama_like::read_shared_fields(j, c, origin);
    DL_CHECK(!hf_config::get_bool_or(j, "attention_bias", false, origin),
             "%s: attention_bias is not supported for phi3", origin.c_str());
    // null or at least the context: every position sees every earlier one.
    const int window = hf_config::get_int_or(j, "sliding_window", 0, INT32_MAX, origin);
    c.sliding_window = window < c.max_position ? window : 0;
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j = shared_hf_json(c);
    j["attention_bias"] = false;
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
    return j;
  }

  std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const override {
    const int64_t C = c.n_embd, I = c.intermediate_size, A = c.attn_dim();
    const int64_t KVD = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
    const std::string p = strprintf("model.layers.%d.", layer);
    return {{p + "input_layernorm.weight", {C}, false, R::kAttnNormWeight},
            {p + "self_attn.qkv_proj.weight", {A + 2 * KVD, C}, true, R::kQkvWeight, S::kQkvFused, 0},
            {p + "self_attn.o_proj.weight", {C, A}, true, R::kAttnOutWeight, S::kQueryHeads, 1},
            {p + "post_attention_layernorm.weight", {C}, false, R::kMlpNormWeight},
            {p + "mlp.gate_up_proj.weight", {2 * I, C}, true, R::kMlpInWeight, S::kGateUpFused, 0},
            {p + "mlp.down_proj.weight", {C, I}, true, R::kMlpOutWeight, S::kMlpHidden, 1}};
  }
};

}  // namespace

const FamilyDef& phi3_family() {
  static const Phi3 family;
  return family;
}

}  // namespace distllm
