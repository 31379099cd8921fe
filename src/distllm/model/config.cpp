#include "distllm/model/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"

namespace distllm {

namespace {

// Llama's MLP width: 2/3 of 4*n_embd rounded up to a multiple of 256, as Meta's
// reference code sizes it when no explicit intermediate_size is given.
int llama_default_intermediate(int n_embd) {
  int hidden = 2 * (4 * n_embd) / 3;
  return (hidden + 255) / 256 * 256;
}

}  // namespace

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
  if (family == ModelFamily::kGpt2) n_kv_head = n_head;
  if (head_dim == 0 && n_head > 0) {
    // Without an explicit head_dim the heads split the width evenly (as Hugging Face).
    DL_CHECK(n_embd % n_head == 0, "n_head (%d) must divide n_embd (%d) unless head_dim is given", n_head, n_embd);
    head_dim = n_embd / n_head;
  }
  if (intermediate_size == 0)
    intermediate_size = family == ModelFamily::kGpt2 ? 4 * n_embd : llama_default_intermediate(n_embd);
  validate();
}

void ModelConfig::validate() const {
  check_field_ranges(*this);
  DL_CHECK(n_kv_head > 0, "n_kv_head must be positive, got %d", n_kv_head);
  DL_CHECK(intermediate_size > 0, "intermediate_size must be positive, got %d", intermediate_size);
  DL_CHECK(head_dim > 0, "head_dim must be positive, got %d", head_dim);
  DL_CHECK(norm_eps > 0.0f, "norm_eps must be positive, got %g", norm_eps);
  DL_CHECK(n_head % n_kv_head == 0, "n_kv_head (%d) must divide n_head (%d)", n_kv_head, n_head);
  if (family == ModelFamily::kGpt2) {
    DL_CHECK(n_embd % n_head == 0, "n_head (%d) must divide n_embd (%d)", n_head, n_embd);
    DL_CHECK(head_dim == n_embd / n_head, "gpt2 head_dim must be n_embd / n_head");
    DL_CHECK(tie_embeddings, "gpt2 models tie the output projection to the token embedding");
  } else {
    DL_CHECK(head_dim % 2 == 0, "head_dim (%d) must be even for rotary embeddings", head_dim);
    DL_CHECK(rope_theta > 0.0, "rope_theta must be positive, got %g", rope_theta);
  }
  // Row widths are int: the field bounds keep (n_head + 2 n_kv_head) * head_dim
  // below 2^24, but say so where it is relied on.
  static_assert(int64_t(3) * kMaxHeads * kMaxHeadDim < (int64_t(1) << 30));
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

namespace {

const nlohmann::json& require(const nlohmann::json& j, const char* key, const std::string& origin) {
  auto it = j.find(key);
  DL_CHECK(it != j.end() && !it->is_null(), "%s: missing required key '%s'", origin.c_str(), key);
  return *it;
}

// A positive integer no larger than `max` (the field's bound in ModelConfig), named
// by its config.json key when it is not.
int get_int(const nlohmann::json& j, const char* key, int max, const std::string& origin) {
  const auto& v = require(j, key, origin);
  DL_CHECK(v.is_number_integer(), "%s: '%s' must be an integer", origin.c_str(), key);
  DL_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(max), "%s: '%s' = %s is larger than the "
           "supported maximum %d", origin.c_str(), key, v.dump().c_str(), max);
  int64_t x = v.get<int64_t>();
  DL_CHECK(x > 0, "%s: '%s' must be positive, got %lld", origin.c_str(), key, (long long)x);
  DL_CHECK(x <= max, "%s: '%s' = %lld is larger than the supported maximum %d", origin.c_str(), key, (long long)x,
           max);
  return static_cast<int>(x);
}

int get_int_or(const nlohmann::json& j, const char* key, int fallback, int max, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return get_int(j, key, max, origin);
}

double get_number_or(const nlohmann::json& j, const char* key, double fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DL_CHECK(it->is_number(), "%s: '%s' must be a number", origin.c_str(), key);
  return it->get<double>();
}

bool get_bool_or(const nlohmann::json& j, const char* key, bool fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DL_CHECK(it->is_boolean(), "%s: '%s' must be true or false", origin.c_str(), key);
  return it->get<bool>();
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const nlohmann::json& j, const std::string& origin) {
  DL_CHECK(j.is_object(), "%s: config must be a JSON object", origin.c_str());
  const auto& type = require(j, "model_type", origin);
  DL_CHECK(type.is_string(), "%s: 'model_type' must be a string", origin.c_str());
  std::string model_type = type.get<std::string>();
  ModelConfig c;
  if (model_type == "gpt2") {
    c.family = ModelFamily::kGpt2;
    c.vocab_size = get_int(j, "vocab_size", kMaxVocab, origin);
    c.n_embd = get_int(j, "n_embd", kMaxWidth, origin);
    c.n_layer = get_int(j, "n_layer", kMaxLayers, origin);
    c.n_head = get_int(j, "n_head", kMaxHeads, origin);
    c.max_position = get_int(j, "n_positions", kMaxPositions, origin);
    c.intermediate_size = get_int_or(j, "n_inner", 0, kMaxIntermediate, origin);
    c.norm_eps = static_cast<float>(get_number_or(j, "layer_norm_epsilon", 1e-5, origin));
    std::string act = j.value("activation_function", std::string("gelu_new"));
    DL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
             "%s: activation_function '%s' is not supported (gpt2 models here use gelu_new)", origin.c_str(),
             act.c_str());
    DL_CHECK(get_bool_or(j, "tie_word_embeddings", true, origin), "%s: untied gpt2 embeddings are not supported",
             origin.c_str());
    DL_CHECK(!get_bool_or(j, "scale_attn_by_inverse_layer_idx", false, origin),
             "%s: scale_attn_by_inverse_layer_idx is not supported", origin.c_str());
    c.tie_embeddings = true;
  } else if (model_type == "llama") {
    c.family = ModelFamily::kLlama;
    c.vocab_size = get_int(j, "vocab_size", kMaxVocab, origin);
    c.n_embd = get_int(j, "hidden_size", kMaxWidth, origin);
    c.n_layer = get_int(j, "num_hidden_layers", kMaxLayers, origin);
    c.n_head = get_int(j, "num_attention_heads", kMaxHeads, origin);
    c.n_kv_head = get_int_or(j, "num_key_value_heads", c.n_head, kMaxHeads, origin);
    c.intermediate_size = get_int(j, "intermediate_size", kMaxIntermediate, origin);
    c.head_dim = get_int_or(j, "head_dim", 0, kMaxHeadDim, origin);
    c.max_position = get_int_or(j, "max_position_embeddings", 2048, kMaxPositions, origin);
    c.norm_eps = static_cast<float>(get_number_or(j, "rms_norm_eps", 1e-6, origin));
    c.rope_theta = get_number_or(j, "rope_theta", 10000.0, origin);
    c.tie_embeddings = get_bool_or(j, "tie_word_embeddings", false, origin);
    DL_CHECK(!get_bool_or(j, "attention_bias", false, origin),
             "%s: attention_bias is not supported", origin.c_str());
    DL_CHECK(!get_bool_or(j, "mlp_bias", false, origin), "%s: mlp_bias is not supported", origin.c_str());
    std::string act = j.value("hidden_act", std::string("silu"));
    DL_CHECK(act == "silu", "%s: hidden_act '%s' is not supported (llama uses silu)", origin.c_str(), act.c_str());
    auto scaling = j.find("rope_scaling");
    DL_CHECK(scaling == j.end() || scaling->is_null(), "%s: rope_scaling is not supported", origin.c_str());
  } else {
    throw_error(strprintf("%s: model_type '%s' is not supported (gpt2 or llama)", origin.c_str(), model_type.c_str()));
  }
  try {
    c.normalize();
  } catch (const Error& e) {
    throw_error(origin + ": " + e.what());
  }
  return c;
}

nlohmann::json ModelConfig::to_hf_json() const {
  nlohmann::json j;
  if (is_gpt2()) {
    j["model_type"] = "gpt2";
    j["architectures"] = {"GPT2LMHeadModel"};
    j["vocab_size"] = vocab_size;
    j["n_embd"] = n_embd;
    j["n_layer"] = n_layer;
    j["n_head"] = n_head;
    j["n_positions"] = max_position;
    j["n_ctx"] = max_position;
    j["n_inner"] = intermediate_size == 4 * n_embd ? nlohmann::json(nullptr) : nlohmann::json(intermediate_size);
    j["layer_norm_epsilon"] = norm_eps;
    j["activation_function"] = "gelu_new";
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["tie_word_embeddings"] = true;
  } else {
    j["model_type"] = "llama";
    j["architectures"] = {"LlamaForCausalLM"};
    j["vocab_size"] = vocab_size;
    j["hidden_size"] = n_embd;
    j["num_hidden_layers"] = n_layer;
    j["num_attention_heads"] = n_head;
    j["num_key_value_heads"] = n_kv_head;
    j["head_dim"] = head_dim;
    j["intermediate_size"] = intermediate_size;
    j["max_position_embeddings"] = max_position;
    j["rms_norm_eps"] = norm_eps;
    j["rope_theta"] = rope_theta;
    j["hidden_act"] = "silu";
    j["tie_word_embeddings"] = tie_embeddings;
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["torch_dtype"] = "float32";
  return j;
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

ParameterParts parameter_parts(const ModelConfig& c) {
  const int64_t V = c.vocab_size, C = c.n_embd, I = c.intermediate_size;
  const int64_t A = c.attn_dim(), KVD = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  ParameterParts p;
  if (c.is_gpt2()) {
    p.embeddings = V * C;
    p.positions = static_cast<int64_t>(c.max_position) * C;
    p.per_layer = 4 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * I + I) + (I * C + C);
    p.head = 2 * C;
  } else {
    p.embeddings = V * C * (c.tie_embeddings ? 1 : 2);
    p.per_layer = 2 * C + A * C + 2 * KVD * C + C * A + 3 * I * C;
    p.head = C;
    p.rope_floats = static_cast<int64_t>(c.max_position) * c.head_dim;
  }
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
    culprit = is_gpt2() ? strprintf("n_positions = %d with n_embd = %d", max_position, n_embd)
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
