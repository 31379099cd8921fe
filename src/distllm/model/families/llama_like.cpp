#include "distllm/model/families/llama_like.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm::llama_like {

using R = TensorRole;
using S = TpSplit;

std::vector<TensorSpec> embed_tensors(const ModelConfig& c) {
  return {{"model.embed_tokens.weight", {c.vocab_size, c.n_embd}, true, R::kTokenEmbedding, S::kVocab, 0}};
}

std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) {
  const int64_t C = c.n_embd, I = c.intermediate_size, A = c.attn_dim(), D = c.head_dim;
  const int64_t KVD = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  const std::string p = strprintf("model.layers.%d.", layer);
  // q|k|v and gate|up are adjacent, so each pair forms one [rows, C] matrix (and
  // their biases one vector).
  std::vector<TensorSpec> t = {
      {p + "input_layernorm.weight", {C}, false, R::kAttnNormWeight},
      {p + "self_attn.q_proj.weight", {A, C}, true, R::kQkvWeight, S::kQueryHeads, 0},
      {p + "self_attn.k_proj.weight", {KVD, C}, true, R::kFusedPart, S::kKvHeads, 0},
      {p + "self_attn.v_proj.weight", {KVD, C}, true, R::kFusedPart, S::kKvHeads, 0}};
  if (c.qkv_bias)
    t.insert(t.end(), {{p + "self_attn.q_proj.bias", {A}, false, R::kQkvBias, S::kQueryHeads, 0},
                       {p + "self_attn.k_proj.bias", {KVD}, false, R::kFusedPart, S::kKvHeads, 0},
                       {p + "self_attn.v_proj.bias", {KVD}, false, R::kFusedPart, S::kKvHeads, 0}});
  if (c.qk_norm)
    t.insert(t.end(), {{p + "self_attn.q_norm.weight", {D}, false, R::kQNormWeight},
                       {p + "self_attn.k_norm.weight", {D}, false, R::kKNormWeight}});
  t.push_back({p + "self_attn.o_proj.weight", {C, A}, true, R::kAttnOutWeight, S::kQueryHeads, 1});
  if (c.attn_out_bias) t.push_back({p + "self_attn.o_proj.bias", {C}, false, R::kAttnOutBias});
  t.insert(t.end(), {{p + "post_attention_layernorm.weight", {C}, false, R::kMlpNormWeight},
                     {p + "mlp.gate_proj.weight", {I, C}, true, R::kMlpInWeight, S::kMlpHidden, 0},
                     {p + "mlp.up_proj.weight", {I, C}, true, R::kFusedPart, S::kMlpHidden, 0}});
  if (c.mlp_bias)
    t.insert(t.end(), {{p + "mlp.gate_proj.bias", {I}, false, R::kMlpInBias, S::kMlpHidden, 0},
                       {p + "mlp.up_proj.bias", {I}, false, R::kFusedPart, S::kMlpHidden, 0}});
  t.push_back({p + "mlp.down_proj.weight", {C, I}, true, R::kMlpOutWeight, S::kMlpHidden, 1});
  if (c.mlp_bias) t.push_back({p + "mlp.down_proj.bias", {C}, false, R::kMlpOutBias});
  return t;
}

std::vector<TensorSpec> head_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> t = {{"model.norm.weight", {c.n_embd}, false, R::kFinalNormWeight}};
  if (!c.tie_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, c.n_embd}, true, R::kLmHead, S::kVocab, 0});
  return t;
}

int default_intermediate(int n_embd) {
  int hidden = 2 * (4 * n_embd) / 3;
  return (hidden + 255) / 256 * 256;
}

void read_shared_fields(const nlohmann::json& j, ModelConfig& c, const std::string& origin) {
  read_shared_fields_but_activation(j, c, origin);
  const std::string act = hf_config::get_string_or(j, "hidden_act", "silu", origin);
  DL_CHECK(act == "silu", "%s: hidden_act '%s' is not supported (this family uses silu)", origin.c_str(), act.c_str());
}

void read_shared_fields_but_activation(const nlohmann::json& j, ModelConfig& c, const std::string& origin) {
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
  const double partial = get_number_or(j, "partial_rotary_factor", 1.0, origin);
  DL_CHECK(partial == 1.0, "%s: partial_rotary_factor %g is not supported (only 1)", origin.c_str(), partial);
  c.rope_scaling = parse_rope_scaling(j, c.max_position, origin);
  // Position interpolation and dynamic NTK stretch the context the model was
  // configured with by their factor (as vLLM serves them); the others' configs
  // already give the stretched context.
  const RopeScaling::Kind kind = c.rope_scaling.kind;
  if (kind == RopeScaling::Kind::kLinear || kind == RopeScaling::Kind::kDynamic) {
    c.rope_scaling.original_max_position = c.max_position;
    const double stretched = c.max_position * c.rope_scaling.factor;
    DL_CHECK(stretched <= ModelConfig::kMaxPositions, "%s: max_position_embeddings x rope_scaling.factor = %.0f is "
             "larger than the supported maximum %d", origin.c_str(), stretched, ModelConfig::kMaxPositions);
    c.max_position = static_cast<int>(stretched);
  }
}

void write_shared_fields(const ModelConfig& c, nlohmann::json& j) {
  const RopeScaling::Kind kind = c.rope_scaling.kind;
  const bool stretched = kind == RopeScaling::Kind::kLinear || kind == RopeScaling::Kind::kDynamic;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.n_embd;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.n_kv_head;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = stretched ? c.rope_scaling.original_max_position : c.max_position;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  if (kind == RopeScaling::Kind::kLongRope && c.rope_scaling.original_max_position > 0)
    j["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_embeddings;
}

void validate_rotary(const ModelConfig& c) {
  DL_CHECK(c.head_dim % 2 == 0, "head_dim (%d) must be even for rotary embeddings", c.head_dim);
  DL_CHECK(c.rope_theta > 0.0, "rope_theta must be positive, got %g", c.rope_theta);
  if (c.rope_scaling.kind == RopeScaling::Kind::kLongRope)
    DL_CHECK(static_cast<int>(c.rope_scaling.short_factor.size()) == c.head_dim / 2 &&
                 static_cast<int>(c.rope_scaling.long_factor.size()) == c.head_dim / 2,
             "rope_scaling: longrope needs head_dim / 2 = %d short and long factors, got %zu and %zu", c.head_dim / 2,
             c.rope_scaling.short_factor.size(), c.rope_scaling.long_factor.size());
}

}  // namespace distllm::llama_like
