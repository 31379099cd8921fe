#include "distllm/model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/family.h"
#include "distllm/model/hf_config_fields.h"

namespace distllm {

namespace {

// Range checks that must run before any derived size is computed (4 * n_embd, the
// Llama MLP default) so that no arithmetic on a hostile value can overflow.
void check_field_ranges(const ModelConfig& c) {
  auto in_range = [](const char* field, int value, int max) {
    DL_CHECK(value > 0, "%s must be positive, got %d", field, value);
    DL_CHECK(value <= max, "%s = %d is larger than the supported maximum %d", field, value, max);
  };
  in_range("vocab_size", c.vocab_size, ModelConfig::kMaxVocab);
  in_range("n_layer", c.n_layer, ModelConfig::kMaxLayers);
  in_range("n_head", c.n_head, ModelConfig::kMaxHeads);
  in_range("n_embd", c.n_embd, ModelConfig::kMaxWidth);
  in_range("max_position", c.max_position, ModelConfig::kMaxPositions);
  if (c.n_kv_head != 0) in_range("n_kv_head", c.n_kv_head, ModelConfig::kMaxHeads);
  if (c.head_dim != 0) in_range("head_dim", c.head_dim, ModelConfig::kMaxHeadDim);
  if (c.intermediate_size != 0) in_range("intermediate_size", c.intermediate_size, ModelConfig::kMaxIntermediate);
}

}  // namespace

void ModelConfig::normalize() {
  check_field_ranges(*this);
  const FamilyDef& def = family_def(family);
  def.normalize(*this);
  if (head_dim == 0 && n_head > 0) {
    // Without an explicit head_dim the heads split the width evenly (as Hugging Face).
    DL_CHECK(n_embd % n_head == 0, "n_head (%d) must divide n_embd (%d) unless head_dim is given", n_head, n_embd);
    head_dim = n_embd / n_head;
  }
  validate();
}

void ModelConfig::validate() const {
  check_field_ranges(*this);
  DL_CHECK(n_kv_head > 0, "n_kv_head must be positive, got %d", n_kv_head);
  DL_CHECK(intermediate_size > 0, "intermediate_size must be positive, got %d", intermediate_size);
  DL_CHECK(head_dim > 0, "head_dim must be positive, got %d", head_dim);
  DL_CHECK(norm_eps > 0.0f, "norm_eps must be positive, got %g", norm_eps);
  DL_CHECK(n_head % n_kv_head == 0, "n_kv_head (%d) must divide n_head (%d)", n_kv_head, n_head);
  DL_CHECK(sliding_window >= 0, "sliding_window must be >= 0, got %d", sliding_window);
  DL_CHECK(sliding_layers.empty() || static_cast<int>(sliding_layers.size()) == n_layer,
           "the per-layer sliding-window list has %zu entries for %d layers", sliding_layers.size(), n_layer);
  DL_CHECK(sliding_layers.empty() || sliding_window > 0, "a per-layer sliding-window list needs sliding_window > 0");
  DL_CHECK(attn_logit_softcap >= 0.0f && std::isfinite(attn_logit_softcap),
           "attention logit soft-capping must be >= 0, got %g", attn_logit_softcap);
  DL_CHECK(final_logit_softcap >= 0.0f && std::isfinite(final_logit_softcap),
           "final logit soft-capping must be >= 0, got %g", final_logit_softcap);
  DL_CHECK(query_pre_attn_scalar >= 0.0f && std::isfinite(query_pre_attn_scalar),
           "query_pre_attn_scalar must be >= 0, got %g", query_pre_attn_scalar);
  DL_CHECK(rope_local_theta >= 0.0 && std::isfinite(rope_local_theta), "the local RoPE base must be >= 0, got %g",
           rope_local_theta);
  family_def(family).validate(*this);
  // Row widths are int: the field bounds keep (n_head + 2 n_kv_head) * head_dim
  // below 2^24, but say so where it is relied on.
  static_assert(int64_t(3) * kMaxHeads * kMaxHeadDim < (int64_t(1) << 30));
}

bool ModelConfig::windowed(int layer) const {
  if (sliding_window <= 0) return false;
  return sliding_layers.empty() || sliding_layers[static_cast<size_t>(layer)];
}

int ModelConfig::kv_window() const {
  int widest = 0;
  for (int l = 0; l < n_layer; ++l) {
    const int w = layer_attention(l).window;
    if (w == 0) return 0;
    widest = std::max(widest, w);
  }
  return widest;
}

ModelConfig::LayerAttention ModelConfig::layer_attention(int layer) const {
  LayerAttention a;
  // A window as long as the context changes nothing: it is left off, so such a
  // layer runs exactly the causal kernels.
  a.window = windowed(layer) && sliding_window < max_position ? sliding_window : 0;
  a.softcap = attn_logit_softcap;
  a.scale = 1.0f / std::sqrt(query_pre_attn_scalar > 0.0f ? query_pre_attn_scalar : static_cast<float>(head_dim));
  a.local_rope = rope_local_theta > 0.0 && windowed(layer);
  return a;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  ModelConfig c;
  if (name == "gpt2-tiny") {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 384;
  } else if (name == "gpt2-124M") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (name == "gpt2-355M") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (name == "llama-tiny") {
    c.family = ModelFamily::kLlama;
    c.n_layer = 6, c.n_head = 6, c.n_kv_head = 2, c.n_embd = 384, c.intermediate_size = 1024;
    c.tie_embeddings = false;
    c.norm_eps = 1e-5f;
  } else if (name == "llama-124M") {
    c.family = ModelFamily::kLlama;
    c.n_layer = 12, c.n_head = 12, c.n_kv_head = 4, c.n_embd = 768, c.intermediate_size = 2048;
    c.tie_embeddings = false;
    c.norm_eps = 1e-5f;
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw_error(strprintf("unknown model preset '%s' (known: %s)", name.c_str(), known.c_str()));
  }
  c.normalize();
  return c;
}

std::vector<std::string> ModelConfig::preset_names() {
  return {"gpt2-tiny", "gpt2-124M", "gpt2-355M", "llama-tiny", "llama-124M"};
}

ModelConfig ModelConfig::from_hf_json(const nlohmann::json& j, const std::string& origin) {
  DL_CHECK(j.is_object(), "%s: config must be a JSON object", origin.c_str());
  const auto& type = hf_config::require(j, "model_type", origin);
  DL_CHECK(type.is_string(), "%s: 'model_type' must be a string", origin.c_str());
  const std::string model_type = type.get<std::string>();
  const FamilyDef* def = find_family(model_type);
  DL_CHECK(def != nullptr, "%s: model_type '%s' is not supported (supported: %s)", origin.c_str(),
           model_type.c_str(), supported_model_types().c_str());
  ModelConfig c;
  c.family = def->id();
  def->from_hf_json(j, c, origin);
  try {
    c.normalize();
  } catch (const Error& e) {
    throw_error(origin + ": " + e.what());
  }
  return c;
}

nlohmann::json ModelConfig::to_hf_json() const {
  nlohmann::json j = family_def(family).to_hf_json(*this);
  j["torch_dtype"] = "float32";
  return j;
}

std::string ModelConfig::family_name() const { return family_def(family).name(); }

BlockSpec ModelConfig::block() const { return family_def(family).block(*this); }

float ModelConfig::embedding_scale() const {
  return block().scaled_embedding ? static_cast<float>(std::sqrt(static_cast<double>(n_embd))) : 1.0f;
}

namespace {

// Where a model's parameters are: the parts a field scales. int64 cannot overflow
// within the field bounds (at most about 2^48 parameters).
struct ParameterParts {
  int64_t embeddings = 0;  // token embedding (+ untied output projection)
  int64_t positions = 0;   // gpt2's learned positions
  int64_t per_layer = 0;
  int64_t head = 0;        // final norm
  int64_t rope_floats = 0; // Llama's cos/sin tables for every position (not parameters)
};

int64_t numel(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// From the family's tensors, so that every family's count is its layout's.
ParameterParts parameter_parts(const ModelConfig& c) {
  const FamilyDef& def = family_def(c.family);
  ParameterParts p;
  auto add = [&](const std::vector<TensorSpec>& ts, int64_t& other) {
    for (const TensorSpec& t : ts) {
      if (t.role == TensorRole::kTokenEmbedding || t.role == TensorRole::kLmHead)
        p.embeddings += numel(t);
      else if (t.role == TensorRole::kPositionEmbedding)
        p.positions += numel(t);
      else
        other += numel(t);
    }
  };
  int64_t embed_other = 0;
  add(def.embed_tensors(c), embed_other);
  add(def.layer_tensors(c, 0), p.per_layer);
  add(def.head_tensors(c), p.head);
  p.head += embed_other;
  if (c.block().rotary()) p.rope_floats = static_cast<int64_t>(c.max_position) * c.head_dim;
  return p;
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  ParameterParts p = parameter_parts(*this);
  return p.embeddings + p.positions + p.per_layer * n_layer + p.head;
}

void ModelConfig::check_fits(int64_t usable_bytes, const std::string& what) const {
  ParameterParts p = parameter_parts(*this);
  const int64_t bytes = (num_parameters() + p.rope_floats) * static_cast<int64_t>(sizeof(float));
  if (bytes <= usable_bytes) return;
  // Name the field behind the largest part, so the message points at the typo.
  std::string culprit;
  int64_t layers = p.per_layer * n_layer;
  int64_t positions = std::max(p.positions, p.rope_floats);
  if (layers >= p.embeddings && layers >= positions) {
    culprit = strprintf("n_layer = %d with n_embd = %d, intermediate_size = %d", n_layer, n_embd, intermediate_size);
  } else if (p.embeddings >= positions) {
    culprit = strprintf("vocab_size = %d with n_embd = %d", vocab_size, n_embd);
  } else {
    culprit = block().learned_positions() ? strprintf("n_positions = %d with n_embd = %d", max_position, n_embd)
                        : strprintf("max_position_embeddings = %d with head_dim = %d", max_position, head_dim);
  }
  throw_error(strprintf("%s: the model needs %.1f GB for its parameters and position tables alone (%s), more than "
                        "the %.1f GB of "
                        "memory this process may use",
                        what.c_str(), bytes / 1e9, culprit.c_str(), usable_bytes / 1e9));
}

std::string ModelConfig::describe() const {
  return strprintf("%s: %d layers, %d heads (%d kv), width %d, mlp %d, vocab %d, context %d, %.2fM parameters",
                   family_name().c_str(), n_layer, n_head, n_kv_head, n_embd, intermediate_size, vocab_size,
                   max_position, num_parameters() / 1e6);
}

}  // namespace distllm
