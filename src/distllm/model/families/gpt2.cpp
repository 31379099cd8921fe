// GPT-2 (GPT2LMHeadModel): LayerNorm with biases, learned positions, a fused
// q|k|v Conv1D ([in, out] matrices), a 4x GELU (tanh) MLP, biases everywhere, the
// output head tied to the token embedding.
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

using R = TensorRole;
using S = TpSplit;

class Gpt2 final : public FamilyDef {
 public:
  ModelFamily id() const override { return ModelFamily::kGpt2; }
  const char* name() const override { return "gpt2"; }
  const char* hf_architecture() const override { return "GPT2LMHeadModel"; }

  BlockSpec block(const ModelConfig&) const override {
    return {NormKind::kLayerNorm, MlpKind::kGeluTanh, PositionKind::kLearned, kernels::WeightLayout::kInOut};
  }

  void normalize(ModelConfig& c) const override {
    c.n_kv_head = c.n_head;
    if (c.intermediate_size == 0) c.intermediate_size = 4 * c.n_embd;
  }

  void validate(const ModelConfig& c) const override {
    DL_CHECK(c.n_embd % c.n_head == 0, "n_head (%d) must divide n_embd (%d)", c.n_head, c.n_embd);
    DL_CHECK(c.head_dim == c.n_embd / c.n_head, "gpt2 head_dim must be n_embd / n_head");
    DL_CHECK(c.tie_embeddings, "gpt2 models tie the output projection to the token embedding");
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    using namespace hf_config;
    c.vocab_size = get_int(j, "vocab_size", ModelConfig::kMaxVocab, origin);
    c.n_embd = get_int(j, "n_embd", ModelConfig::kMaxWidth, origin);
    c.n_layer = get_int(j, "n_layer", ModelConfig::kMaxLayers, origin);
    c.n_head = get_int(j, "n_head", ModelConfig::kMaxHeads, origin);
    c.max_position = get_int(j, "n_positions", ModelConfig::kMaxPositions, origin);
    c.intermediate_size = get_int_or(j, "n_inner", 0, ModelConfig::kMaxIntermediate, origin);
    c.norm_eps = static_cast<float>(get_number_or(j, "layer_norm_epsilon", 1e-5, origin));
    const std::string act = get_string_or(j, "activation_function", "gelu_new", origin);
    DL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
             "%s: activation_function '%s' is not supported (gpt2 models here use gelu_new)", origin.c_str(),
             act.c_str());
    DL_CHECK(get_bool_or(j, "tie_word_embeddings", true, origin), "%s: untied gpt2 embeddings are not supported",
             origin.c_str());
    DL_CHECK(!get_bool_or(j, "scale_attn_by_inverse_layer_idx", false, origin),
             "%s: scale_attn_by_inverse_layer_idx is not supported", origin.c_str());
    c.tie_embeddings = true;
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j;
    j["model_type"] = "gpt2";
    j["architectures"] = {hf_architecture()};
    j["vocab_size"] = c.vocab_size;
    j["n_embd"] = c.n_embd;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_positions"] = c.max_position;
    j["n_ctx"] = c.max_position;
    j["n_inner"] = c.intermediate_size == 4 * c.n_embd ? nlohmann::json(nullptr) : nlohmann::json(c.intermediate_size);
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = "gelu_new";
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["tie_word_embeddings"] = true;
    return j;
  }

  std::vector<TensorSpec> embed_tensors(const ModelConfig& c) const override {
    const int64_t V = c.vocab_size, C = c.n_embd, P = c.max_position;
    return {{"transformer.wte.weight", {V, C}, true, R::kTokenEmbedding, S::kVocab, 0},
            {"transformer.wpe.weight", {P, C}, true, R::kPositionEmbedding}};
  }

  std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const override {
    const int64_t C = c.n_embd, I = c.intermediate_size, A = c.attn_dim(), QKV = c.qkv_dim();
    const std::string p = strprintf("transformer.h.%d.", layer);
    // Conv1D matrices are [in, out]: column-parallel ones split their axis 1.
    return {{p + "ln_1.weight", {C}, false, R::kAttnNormWeight},
            {p + "ln_1.bias", {C}, false, R::kAttnNormBias},
            {p + "attn.c_attn.weight", {C, QKV}, true, R::kQkvWeight, S::kQkvFused, 1},
            {p + "attn.c_attn.bias", {QKV}, false, R::kQkvBias, S::kQkvFused, 0},
            {p + "attn.c_proj.weight", {A, C}, true, R::kAttnOutWeight, S::kQueryHeads, 0},
            {p + "attn.c_proj.bias", {C}, false, R::kAttnOutBias},
            {p + "ln_2.weight", {C}, false, R::kMlpNormWeight},
            {p + "ln_2.bias", {C}, false, R::kMlpNormBias},
            {p + "mlp.c_fc.weight", {C, I}, true, R::kMlpInWeight, S::kMlpHidden, 1},
            {p + "mlp.c_fc.bias", {I}, false, R::kMlpInBias, S::kMlpHidden, 0},
            {p + "mlp.c_proj.weight", {I, C}, true, R::kMlpOutWeight, S::kMlpHidden, 0},
            {p + "mlp.c_proj.bias", {C}, false, R::kMlpOutBias}};
  }

  std::vector<TensorSpec> head_tensors(const ModelConfig& c) const override {
    const int64_t C = c.n_embd;
    return {{"transformer.ln_f.weight", {C}, false, R::kFinalNormWeight},
            {"transformer.ln_f.bias", {C}, false, R::kFinalNormBias}};
  }

  // transformers saves GPT-2 either with the "transformer." prefix (GPT2LMHeadModel)
  // or without it (GPT2Model). Map the bare form onto ours.
  std::string canonical_tensor_name(const std::string& name) const override {
    if (!starts_with(name, "transformer.") && name != "lm_head.weight") return "transformer." + name;
    return name;
  }

  bool ignorable_tensor(const std::string& name, const ModelConfig& c) const override {
    // The causal mask buffers older transformers versions saved.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) return true;
    return FamilyDef::ignorable_tensor(name, c);
  }
};

}  // namespace

const FamilyDef& gpt2_family() {
  static const Gpt2 family;
  return family;
}

}  // namespace distllm
