// Gemma 3's text decoder (Gemma3ForCausalLM, model_type gemma3_text; gemma-3-1b and
// the language model of the larger ones): the Gemma decoder (gemma.h) with per-head
// q/k RMSNorms (1 + w) before RoPE, five local layers to one global
// (sliding_window_pattern, or layer_types), local layers rotated with
// rope_local_base_freq and no rope_scaling, global ones with rope_theta and
// rope_scaling; soft-capping usually off.
#include "distllm/base/error.h"
#include "distllm/model/families/gemma.h"
#include "distllm/model/families/registry.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {
namespace {

constexpr int kDefaultPattern = 6;
constexpr double kDefaultLocalBase = 10000.0;
constexpr double kDefaultTheta = 1000000.0;

std::vector<bool> pattern_layers(int n_layer, int pattern) {
  std::vector<bool> s(static_cast<size_t>(n_layer));
  for (int l = 0; l < n_layer; ++l) s[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
  return s;
}

class Gemma3Text final : public gemma::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kGemma3Text; }
  const char* name() const override { return "gemma3_text"; }
  const char* hf_architecture() const override { return "Gemma3ForCausalLM"; }

  void normalize(ModelConfig& c) const override {
    c.qk_norm = true;
    if (c.rope_local_theta == 0.0) c.rope_local_theta = kDefaultLocalBase;
    Family::normalize(c);
  }
  void validate(const ModelConfig& c) const override {
    Family::validate(c);
    DL_CHECK(c.qk_norm, "gemma3_text has q/k norms");
    DL_CHECK(c.rope_local_theta > 0.0, "gemma3_text needs a local RoPE base (rope_local_base_freq)");
  }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    using namespace hf_config;
    DL_CHECK(!get_bool_or(j, "use_bidirectional_attention", false, origin),
             "%s: use_bidirectional_attention is not supported for gemma3_text", origin.c_str());
    const int pattern = get_int_or(j, "sliding_window_pattern", kDefaultPattern, ModelConfig::kMaxLayers + 1, origin);
    read_gemma_fields(j, c, origin);
    c.rope_theta = get_number_or(j, "rope_theta", kDefaultTheta, origin);
    c.rope_local_theta = get_number_or(j, "rope_local_base_freq", kDefaultLocalBase, origin);
    DL_CHECK(c.rope_local_theta > 0.0, "%s: rope_local_base_freq must be positive", origin.c_str());
    if (j.find("layer_types") == j.end() || j["layer_types"].is_null()) c.sliding_layers = pattern_layers(c.n_layer, pattern);
    c.qk_norm = true;
  }

  nlohmann::json to_hf_json(const ModelConfig& c) const override {
    nlohmann::json j = gemma_hf_json(c);
    j["rope_local_base_freq"] = c.rope_local_theta;
    // transformers before layer_types read the pattern: written when the layers follow one.
    for (int p = 1; p <= c.n_layer + 1; ++p)
      if (pattern_layers(c.n_layer, p) == c.sliding_layers) {
        j["sliding_window_pattern"] = p;
        break;
      }
    return j;
  }

 protected:
  std::vector<bool> default_sliding_layers(int n_layer) const override {
    return pattern_layers(n_layer, kDefaultPattern);
  }
};

}  // namespace

const FamilyDef& gemma3_text_family() {
  static const Gemma3Text family;
  return family;
}

}  // namespace distllm
