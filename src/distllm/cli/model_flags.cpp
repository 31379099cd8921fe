#include "distllm/cli/model_flags.h"

#include "distllm/base/error.h"
#include "distllm/model/family.h"

namespace distllm {

ModelConfig model_config_from_flags(Args& args, const std::string& default_preset, int vocab_hint) {
  std::string names;
  for (const auto& n : ModelConfig::preset_names()) names += (names.empty() ? "" : ", ") + n;
  std::string preset = args.get_string("preset", default_preset, "model preset: " + names);
  auto family = args.get_optional("family", "model family (" + supported_model_types() + ") with explicit sizes");
  auto head_dim = args.get_int("head-dim", 0, "attention head width (0: n-embd / n-head; rotary families)");
  int64_t n_layer = args.get_int("n-layer", 0, "transformer blocks (0: preset)");
  int64_t n_head = args.get_int("n-head", 0, "attention heads (0: preset)");
  int64_t n_kv_head = args.get_int("n-kv-head", 0, "key/value heads for llama (0: preset)");
  int64_t n_embd = args.get_int("n-embd", 0, "model width (0: preset)");
  int64_t inter = args.get_int("intermediate-size", 0, "MLP width (0: preset/default)");
  int64_t vocab = args.get_int("vocab-size", 0, "vocabulary size (0: from the data / tokenizer)");
  int64_t ctx = args.get_int("max-seq", 0, "context length (0: preset)");

  ModelConfig c = ModelConfig::preset(preset);
  if (family) {
    const FamilyDef* def = find_family(*family);
    DL_CHECK(def != nullptr, "--family must be one of %s, got '%s'", supported_model_types().c_str(), family->c_str());
    if (def->id() != c.family) {
      // The preset's sizes in the other family's shape.
      const bool was_gpt2 = c.is_gpt2();
      c.family = def->id();
      c.tie_embeddings = c.is_gpt2();
      c.intermediate_size = 0;
      if (was_gpt2 || c.is_gpt2()) c.n_kv_head = c.n_head;
      c.qkv_bias = c.attn_out_bias = c.mlp_bias = c.qk_norm = false;
    }
  }
  bool resized = false;
  auto set = [&](int& field, int64_t value, const char* flag) {
    if (value == 0) return;
    DL_CHECK(value > 0 && value < (int64_t(1) << 30), "--%s must be positive, got %lld", flag, (long long)value);
    field = static_cast<int>(value);
    resized = true;
  };
  set(c.n_layer, n_layer, "n-layer");
  set(c.n_head, n_head, "n-head");
  if (n_head != 0 && n_kv_head == 0 && !c.is_gpt2()) c.n_kv_head = c.n_head;
  set(c.n_kv_head, n_kv_head, "n-kv-head");
  set(c.n_embd, n_embd, "n-embd");
  set(c.intermediate_size, inter, "intermediate-size");
  set(c.max_position, ctx, "max-seq");
  if (resized) {
    c.head_dim = 0;
    if (inter == 0 && n_embd != 0) c.intermediate_size = 0;
  }
  set(c.head_dim, head_dim, "head-dim");  // after the resize reset it
  if (vocab != 0) {
    set(c.vocab_size, vocab, "vocab-size");
  } else if (vocab_hint > 0) {
    c.vocab_size = vocab_hint;
  }
  c.normalize();
  return c;
}

DType parse_inference_dtype(const std::string& text) {
  if (text == "int8") return DType::kI8;
  if (text == "f32" || text == "float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  throw Error("--dtype must be f32, bf16 or int8, got '" + text + "'");
}

DType parse_kv_cache_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "int8") return DType::kI8;
  throw Error("--kv-cache-dtype must be f32, bf16 or int8, got '" + text + "'");
}

DType kv_cache_dtype_flag(Args& args) {
  return parse_kv_cache_dtype(
      args.get_string("kv-cache-dtype", "f32",
                      "K/V cache storage: f32; bf16 (half the bytes per token, twice the tokens per GiB); or int8 "
                      "(one f32 scale per token and KV head: about 3.8x the tokens per GiB at head_dim 64)"));
}

const char* inference_dtype_name(DType dtype) { return dtype == DType::kI8 ? "int8" : dtype_short_name(dtype); }

DType inference_dtype_flag(Args& args) {
  return parse_inference_dtype(args.get_string(
      "dtype", "f32", "weight storage for inference: f32, bf16 (weight-only), or int8 (per-32 block scales; the linears' inputs quantized alike, as llama.cpp's q8_0)"));
}

}  // namespace distllm
