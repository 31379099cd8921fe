// Gemma 2 (Gemma2ForCausalLM; gemma-2-2b/9b/27b): the Gemma decoder (gemma.h) whose
// even layers are local (sliding window) and odd layers global, all rotated with
// rope_theta, with attention scores soft-capped at attn_logit_softcapping (50) and
// the output logits at final_logit_softcapping (30).
#include "distllm/base/error.h"
#include "distllm/model/families/gemma.h"
#include "distllm/model/families/registry.h"

namespace distllm {
namespace {

class Gemma2 final : public gemma::Family {
 public:
  ModelFamily id() const override { return ModelFamily::kGemma2; }
  const char* name() const override { return "gemma2"; }
  const char* hf_architecture() const override { return "Gemma2ForCausalLM"; }

  void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const override {
    read_gemma_fields(j, c, origin);
    c.qk_norm = false;
  }
  nlohmann::json to_hf_json(const ModelConfig& c) const override { return gemma_hf_json(c); }

  void validate(const ModelConfig& c) const override {
    Family::validate(c);
    DL_CHECK(!c.qk_norm && c.rope_local_theta == 0.0, "gemma2 has no q/k norms and one RoPE base");
  }

 protected:
  std::vector<bool> default_sliding_layers(int n_layer) const override {
    std::vector<bool> s(static_cast<size_t>(n_layer));
    for (int l = 0; l < n_layer; ++l) s[static_cast<size_t>(l)] = l % 2 == 0;
    return s;
  }
};

}  // namespace

const FamilyDef& gemma2_family() {
  static const Gemma2 family;
  return family;
}

}  // namespace distllm
