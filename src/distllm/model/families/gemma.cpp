#include "distllm/model/families/gemma.h"

#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm::gemma {

namespace {

using R = TensorRole;

// transformers' defaults for fields a Gemma config.json may leave out.
constexpr int kDefaultHeadDim = 256;
constexpr float kDefaultQueryPreAttnScalar = 256.0f;
constexpr int kDefaultSlidingWindow = 4096;
constexpr const char* kActivation = "gelu_pytorch_tanh";

// layer_types: one "sliding_attention" or "full_attention" per layer.
std::vector<bool> parse_layer_types(const nlohmann::json& types, int n_layer, const std::string& origin) {
  DL_CHECK(types.is_array() && static_cast<int>(types.size()) == n_layer,
           "%s: 'layer_types' must list one type per layer (%d)", origin.c_str(), n_layer);
  std::vector<bool> sliding;
  for (const auto& t : types) {
    const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
    DL_CHECK(type == "sliding_attention" || type == "full_attention",
             "%s: 'layer_types' entry '%s' is not supported (sliding_attention or full_attention)", origin.c_str(),
             type.c_str());
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
}

}  // namespace

BlockSpec Family::block(const ModelConfig& c) const {
  BlockSpec b = llama_like::Family::block(c);
  b.norm = NormKind::kRmsNormPlusOne;
  b.mlp = MlpKind::kGeGluTanh;
  b.qk_norm = c.qk_norm;
  b.post_norms = true;
  b.scaled_embedding = true;
  return b;
}

void Family::normalize(ModelConfig& c) const {
  llama_like::Family::normalize(c);
  if (c.sliding_window == 0) c.sliding_window = kDefaultSlidingWindow;
  if (c.sliding_layers.empty()) c.sliding_layers = default_sliding_layers(c.n_layer);
}

void Family::validate(const ModelConfig& c) const {
  llama_like::validate_rotary(c);
  DL_CHECK(!c.qkv_bias && !c.attn_out_bias && !c.mlp_bias, "%s has no biases", name());
  DL_CHECK(c.rope_scaling.kind == RopeScaling::Kind::kNone || c.rope_scaling.kind == RopeScaling::Kind::kLinear,
           "%s: only linear rope_scaling is supported", name());
}

std::vector<TensorSpec> Family::layer_tensors(const ModelConfig& c, int layer) const {
  // The Llama block's tensors, where post_attention_layernorm norms the attention
  // output, and the MLP's own pre- and post-norms.
  const int64_t C = c.n_embd;
  const std::string p = strprintf("model.layers.%d.", layer);
  std::vector<TensorSpec> t;
  for (TensorSpec& s : llama_like::layer_tensors(c, layer)) {
    if (s.role == R::kMlpNormWeight) {
      t.push_back({p + "post_attention_layernorm.weight", {C}, false, R::kAttnPostNormWeight});
      t.push_back({p + "pre_feedforward_layernorm.weight", {C}, false, R::kMlpNormWeight});
      continue;
    }
    t.push_back(std::move(s));
  }
  t.push_back({p + "post_feedforward_layernorm.weight", {C}, false, R::kMlpPostNormWeight});
  return t;
}

void Family::read_gemma_fields(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const {
  using namespace hf_config;
  llama_like::read_shared_fields_but_activation(j, c, origin);
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    const std::string act = get_string_or(j, key, kActivation, origin);
    DL_CHECK(act == kActivation, "%s: %s '%s' is not supported (this family uses %s)", origin.c_str(), key,
             act.c_str(), kActivation);
  }
  c.head_dim = get_int_or(j, "head_dim", kDefaultHeadDim, ModelConfig::kMaxHeadDim, origin);
  c.tie_embeddings = get_bool_or(j, "tie_word_embeddings", true, origin);
  // A linear factor is already in max_position_embeddings (Gemma 3's 131072 is the
  // stretched context): undo the stretch the Llama fields applied.
  if (c.rope_scaling.kind == RopeScaling::Kind::kLinear) c.max_position = c.rope_scaling.original_max_position;
  DL_CHECK(!get_bool_or(j, "attention_bias", false, origin), "%s: attention_bias is not supported for %s",
           origin.c_str(), name());
  const double dropout = get_number_or(j, "attention_dropout", 0.0, origin);
  DL_CHECK(dropout == 0.0, "%s: attention_dropout %g is not supported (only 0)", origin.c_str(), dropout);
  c.query_pre_attn_scalar =
      static_cast<float>(get_number_or(j, "query_pre_attn_scalar", kDefaultQueryPreAttnScalar, origin));
  DL_CHECK(c.query_pre_attn_scalar > 0.0f, "%s: query_pre_attn_scalar must be positive", origin.c_str());
  c.sliding_window = get_int_or(j, "sliding_window", kDefaultSlidingWindow, ModelConfig::kMaxPositions, origin);
  c.attn_logit_softcap = static_cast<float>(get_number_or(j, "attn_logit_softcapping", 0.0, origin));
  c.final_logit_softcap = static_cast<float>(get_number_or(j, "final_logit_softcapping", 0.0, origin));
  auto types = j.find("layer_types");
  c.sliding_layers = types != j.end() && !types->is_null() ? parse_layer_types(*types, c.n_layer, origin)
                                                           : default_sliding_layers(c.n_layer);
}

nlohmann::json Family::gemma_hf_json(const ModelConfig& c) const {
  nlohmann::json j = shared_hf_json(c);
  j["hidden_act"] = kActivation;
  j["hidden_activation"] = kActivation;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0.0f ? c.query_pre_attn_scalar : c.head_dim;
  j["sliding_window"] = c.sliding_window;
  auto cap = [](float v) { return v > 0.0f ? nlohmann::json(v) : nlohmann::json(nullptr); };
  j["attn_logit_softcapping"] = cap(c.attn_logit_softcap);
  j["final_logit_softcapping"] = cap(c.final_logit_softcap);
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < c.n_layer; ++l) types.push_back(c.windowed(l) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["cache_implementation"] = "hybrid";
  return j;
}

}  // namespace distllm::gemma
