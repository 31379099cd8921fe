// Llama (LlamaForCausalLM): RMSNorm, rotary positions, grouped-query attention
// with separate q/k/v projections ([out, in] Linear matrices), a SwiGLU MLP, no
// biases, an untied output head unless tie_word_embeddings says otherwise.
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

using R = TensorRole;
using S = TpSplit;

// Llama's MLP width: 2/3 of 4*n_embd rounded up to a multiple of 256, as Meta's
// reference code sizes it when no explicit intermediate_size is given.
int default_intermediate(int n_embd) {
  int hidden = 2 * (4 * n_embd) / 3;
  return (hidden + 255) / 256 * 256;
}

class Llama final : public FamilyDef {
 public:
  ModelFamily id() const override { return ModelFamily::kLlama; }
  const char* name() const override { return "llama"; }
  const char* hf_architecture() const override { return "LlamaForCausalLM"; }

  BlockSpec block(const ModelConfig&) const override {
    return {NormKind::kRmsNorm, MlpKind::kSwiGlu, PositionKind::kRotary, kernels::WeightLayout::kOutIn};
  }

  void normalize(ModelConfig& c) const override {
    if (c.intermediate_size == 0) c.intermediate_size = default_intermediate(c.n_embd);
  }

  void validate(const ModelConfig& c) const override {
    DL_CHECK(c.head_dim % 2 == 0, "head_dim (%d) must be even for rotary embeddings", c.head_dim);
    DL_CHECK(c.rope_theta > 0.0, "rope_theta must be positive, got %g", c.rope_theta);
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    using namespace hf_config;
    c.vocab_size = get_int(j, "vocab_size", ModelConfig::kMaxVocab, origin);
    c.n_embd = get_int(j, "hidden_size", ModelConfig::kMaxWidth, origin);
    c.n_layer = get_int(j, "num_hidden_layers", ModelConfig::kMaxLayers, origin);
    c.n_head = get_int(j, "num_attention_heads", ModelConfig::kMaxHeads, origin);
    c.n_kv_head = get_int_or(j, "num_key_value_heads", c.n_head, ModelConfig::kMaxHeads, origin);
    c.intermediate_size = get_int(j, "intermediate_size", ModelConfig::kMaxIntermediate, origin);
    c.head_dim = get_int_or(j, "head_dim", 0, ModelConfig::kMaxHeadDim, origin);
    c.max_position = get_int_or(j, "max_position_embeddings", 2048, ModelConfig::kMaxPositions, origin);
    c.norm_eps = static_cast<float>(get_number_or(j, "rms_norm_eps", 1e-6, origin));
    c.rope_theta = get_number_or(j, "rope_theta", 10000.0, origin);
    c.tie_embeddings = get_bool_or(j, "tie_word_embeddings", false, origin);
    DL_CHECK(!get_bool_or(j, "attention_bias", false, origin), "%s: attention_bias is not supported",
             origin.c_str());
    DL_CHECK(!get_bool_or(j, "mlp_bias", false, origin), "%s: mlp_bias is not supported", origin.c_str());
    const std::string act = get_string_or(j, "hidden_act", "silu", origin);
    DL_CHECK(act == "silu", "%s: hidden_act '%s' is not supported (llama uses silu)", origin.c_str(), act.c_str());
    auto scaling = j.find("rope_scaling");
    DL_CHECK(scaling == j.end() || scaling->is_null(), "%s: rope_scaling is not supported", origin.c_str());
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j;
    j["model_type"] = "llama";
    j["architectures"] = {hf_architecture()};
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.n_embd;
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.n_kv_head;
    j["head_dim"] = c.head_dim;
    j["intermediate_size"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position;
    j["rms_norm_eps"] = c.norm_eps;
    j["rope_theta"] = c.rope_theta;
    j["hidden_act"] = "silu";
    j["tie_word_embeddings"] = c.tie_embeddings;
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    return j;
  }

  std::vector<TensorSpec> embed_tensors(const ModelConfig& c) const override {
    return {{"model.embed_tokens.weight", {c.vocab_size, c.n_embd}, true, R::kTokenEmbedding, S::kVocab, 0}};
  }

  std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const override {
    const int64_t C = c.n_embd, I = c.intermediate_size, A = c.attn_dim();
    const int64_t KVD = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
    const std::string p = strprintf("model.layers.%d.", layer);
    // q|k|v and gate|up are adjacent, so each pair forms one [rows, C] matrix.
    return {{p + "input_layernorm.weight", {C}, false, R::kAttnNormWeight},
            {p + "self_attn.q_proj.weight", {A, C}, true, R::kQkvWeight, S::kQueryHeads, 0},
            {p + "self_attn.k_proj.weight", {KVD, C}, true, R::kFusedPart, S::kKvHeads, 0},
            {p + "self_attn.v_proj.weight", {KVD, C}, true, R::kFusedPart, S::kKvHeads, 0},
            {p + "self_attn.o_proj.weight", {C, A}, true, R::kAttnOutWeight, S::kQueryHeads, 1},
            {p + "post_attention_layernorm.weight", {C}, false, R::kMlpNormWeight},
            {p + "mlp.gate_proj.weight", {I, C}, true, R::kMlpInWeight, S::kMlpHidden, 0},
            {p + "mlp.up_proj.weight", {I, C}, true, R::kFusedPart, S::kMlpHidden, 0},
            {p + "mlp.down_proj.weight", {C, I}, true, R::kMlpOutWeight, S::kMlpHidden, 1}};
  }

  std::vector<TensorSpec> head_tensors(const ModelConfig& c) const override {
    std::vector<TensorSpec> t = {{"model.norm.weight", {c.n_embd}, false, R::kFinalNormWeight}};
    if (!c.tie_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, c.n_embd}, true, R::kLmHead, S::kVocab, 0});
    return t;
  }
};

}  // namespace

const FamilyDef& llama_family() {
  static const Llama family;
  return family;
}

}  // namespace distllm
