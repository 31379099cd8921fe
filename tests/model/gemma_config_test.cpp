// Gemma 2 and Gemma 3 config.json as the published checkpoints write them: every
// field lands in ModelConfig (local/global layers, soft-caps, scale, RoPE bases),
// parameter counts equal the released models', configs round-trip, and fields the
// code does not implement are refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"

namespace distllm {
namespace {

// google/gemma-2-2b's config.json.
nlohmann::json gemma2_2b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
    "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2",
    "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "torch_dtype": "float32", "transformers_version": "4.42.4", "use_cache": true, "vocab_size": 256000})");
}

// google/gemma-3-1b-pt's config.json.
nlohmann::json gemma3_1b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})");
}

std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_hf_json(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GemmaConfig, Gemma2FieldsAndParameterCount) {
  const ModelConfig c = ModelConfig::from_hf_json(gemma2_2b(), "config.json");
  EXPECT_EQ(c.family, ModelFamily::kGemma2);
  EXPECT_EQ(c.num_parameters(), 2614341888);  // Gemma2ForCausalLM's count (tied head)
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.block().norm, NormKind::kRmsNormPlusOne);
  EXPECT_EQ(c.block().mlp, MlpKind::kGeGluTanh);
  EXPECT_TRUE(c.block().post_norms && c.block().scaled_embedding && !c.block().qk_norm);
  EXPECT_FLOAT_EQ(c.embedding_scale(), 48.0f);  // sqrt(2304)
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  for (int l = 0; l < 4; ++l) {
    const ModelConfig::LayerAttention a = c.layer_attention(l);
    EXPECT_EQ(a.window, l % 2 == 0 ? 4096 : 0) << l;  // even layers local
    EXPECT_FLOAT_EQ(a.softcap, 50.0f);
    EXPECT_FLOAT_EQ(a.scale, 1.0f / 16.0f);
    EXPECT_FALSE(a.local_rope);
  }
  ParamLayout layout(c);
  EXPECT_EQ(layout.tensor("model.layers.3.post_feedforward_layernorm.weight").role, TensorRole::kMlpPostNormWeight);
  EXPECT_EQ(layout.tensor("model.layers.3.post_attention_layernorm.weight").role, TensorRole::kAttnPostNormWeight);
  EXPECT_EQ(layout.tensor("model.layers.3.pre_feedforward_layernorm.weight").role, TensorRole::kMlpNormWeight);
  EXPECT_FALSE(layout.find("lm_head.weight").has_value());
  EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "again").to_hf_json(), c.to_hf_json());
}

TEST(GemmaConfig, Gemma3FieldsAndParameterCount) {
  const ModelConfig c = ModelConfig::from_hf_json(gemma3_1b(), "config.json");
  EXPECT_EQ(c.family, ModelFamily::kGemma3Text);
  EXPECT_EQ(c.num_parameters(), 999885952);  // gemma-3-1b
  EXPECT_TRUE(c.block().qk_norm && c.tie_embeddings);
  EXPECT_EQ(c.attn_logit_softcap, 0.0f);
  EXPECT_EQ(c.final_logit_softcap, 0.0f);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_local_theta, 1e4);
  for (int l = 0; l < 12; ++l) {
    const bool local = (l + 1) % 6 != 0;  // five local layers, then a global one
    EXPECT_EQ(c.layer_attention(l).window, local ? 512 : 0) << l;
    EXPECT_EQ(c.layer_attention(l).local_rope, local) << l;
  }
  const nlohmann::json back = c.to_hf_json();
  EXPECT_EQ(back["sliding_window_pattern"], 6);
  EXPECT_EQ(back["layer_types"][5], "full_attention");
  EXPECT_EQ(ModelConfig::from_hf_json(back, "again").to_hf_json(), back);

  // layer_types (newer transformers) wins over the pattern; Gemma 3's 4B+ linear
  // scaling keeps max_position_embeddings as the context.
  nlohmann::json j = gemma3_1b();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const ModelConfig t = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(t.sliding_layers, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(t.max_position, 32768);
  EXPECT_EQ(t.rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_EQ(ModelConfig::from_hf_json(t.to_hf_json(), "again").to_hf_json(), t.to_hf_json());
}

TEST(GemmaConfig, UnimplementedFieldsAreRefusedByName) {
  auto with = [](nlohmann::json j, const char* key, nlohmann::json v) {
    j[key] = std::move(v);
    return j;
  };
  EXPECT_NE(error_of(with(gemma2_2b(), "hidden_activation", "gelu")).find("hidden_activation 'gelu' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(with(gemma2_2b(), "hidden_act", "silu")).find("hidden_act 'silu' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(with(gemma2_2b(), "attention_dropout", 0.1)).find("attention_dropout 0.1 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(with(gemma2_2b(), "attention_bias", true)).find("attention_bias is not supported for gemma2"),
            std::string::npos);
  EXPECT_NE(error_of(with(gemma3_1b(), "use_bidirectional_attention", true)).find("use_bidirectional_attention"),
            std::string::npos);
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < 26; ++l) types.push_back(l == 3 ? "chunked_attention" : "full_attention");
  EXPECT_NE(error_of(with(gemma3_1b(), "layer_types", types)).find("'chunked_attention' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(with(gemma3_1b(), "layer_types", {"full_attention"})).find("one type per layer (26)"),
            std::string::npos);
  EXPECT_NE(error_of(with(gemma3_1b(), "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}))
                .find("only linear rope_scaling is supported"),
            std::string::npos);
}

}  // namespace
}  // namespace distllm
