// Model hyper-parameters. What differs between families (their config.json
// fields, defaults, tensors and blocks) is in model/families/, one file each
// (family.h); this struct holds the sizes every family shares, and block() says
// what the family's decoder block is made of.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "distllm/model/block_spec.h"
#include "distllm/model/rope_scaling.h"

namespace distllm {

enum class ModelFamily { kGpt2, kLlama, kQwen2, kQwen3, kPhi3, kMistral, kGemma2, kGemma3Text };

struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt2;
  int vocab_size = 50257;
  int n_layer = 6;
  int n_head = 6;
  int n_kv_head = 6;           // == n_head for gpt2
  int n_embd = 384;
  int head_dim = 0;            // 0: n_embd / n_head
  int intermediate_size = 0;   // 0: 4 * n_embd (gpt2) or the Llama default
  int max_position = 1024;     // context length (and learned positions for gpt2)
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  bool tie_embeddings = true;
  // Features some families have (each family's file says which it reads):
  RopeScaling rope_scaling;  // rotary positions stretched beyond the training context
  bool qkv_bias = false;     // biases on q, k and v (Qwen2; Llama's attention_bias)
  bool attn_out_bias = false;  // a bias on the attention output (Llama's attention_bias)
  bool mlp_bias = false;     // biases on the MLP's linears (Llama's mlp_bias)
  bool qk_norm = false;      // RMSNorm of each head of q and k before RoPE (Qwen3)
  // Attention variants (Mistral, Gemma 2/3); layer_attention() says what one layer uses.
  int sliding_window = 0;    // a windowed layer's query sees the last sliding_window keys, itself included; 0: none
  // Which layers are windowed when sliding_window > 0: empty, every layer (Mistral);
  // else one entry per layer (Gemma's alternating local and global layers).
  std::vector<bool> sliding_layers;
  float attn_logit_softcap = 0.0f;   // attention scores s -> cap * tanh(s / cap); 0: none (Gemma 2)
  float final_logit_softcap = 0.0f;  // the same on the output logits; 0: none (Gemma 2)
  float query_pre_attn_scalar = 0.0f;  // scores are scaled by its 1/sqrt; 0: head_dim (Gemma)
  // RoPE base of the windowed layers, which then use no rope_scaling (Gemma 3's
  // rope_local_base_freq); 0: the same rotation as every other layer.
  double rope_local_theta = 0.0;

  // Derived sizes (valid after normalize()).
  int attn_dim() const { return n_head * head_dim; }                     // width of q and attention output
  int qkv_dim() const { return (n_head + 2 * n_kv_head) * head_dim; }     // fused q|k|v row
  int mlp_in_dim() const { return block().gated_mlp() ? 2 * intermediate_size : intermediate_size; }
  int mlp_act_dim() const { return intermediate_size; }
  bool is_gpt2() const { return family == ModelFamily::kGpt2; }
  // What the token embedding is multiplied by: sqrt(n_embd) rounded to f32 with a
  // scaled_embedding block (as transformers casts it to the activations' dtype), else 1.
  float embedding_scale() const;
  std::string family_name() const;  // the Hugging Face model_type
  // The family's block (family.h): norm, MLP, positions, matrix storage.
  BlockSpec block() const;

  // What attention layer `layer` computes (the variant fields above, resolved).
  struct LayerAttention {
    int window = 0;            // keys a query sees, itself included; 0: all before it
    float softcap = 0.0f;      // 0: none
    float scale = 1.0f;        // multiplies q.k
    bool local_rope = false;   // rotated with the local table (rope_local_theta)
  };
  LayerAttention layer_attention(int layer) const;
  bool windowed(int layer) const;
  bool has_window() const { return sliding_window > 0; }
  // The window every layer attends within (keys before a query's window are never
  // read again: a serving cache may free them); 0 when some layer sees every key.
  int kv_window() const;

  // Fills derived defaults (head_dim, and the family's: intermediate_size, gpt2's
  // n_kv_head) and then validates; throws distllm::Error naming the offending field.
  void normalize();
  void validate() const;

  // Named presets: gpt2-tiny, gpt2-124M, gpt2-355M, llama-tiny, llama-124M.
  static ModelConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  // Hugging Face config.json (a model_type of a registered family). Keys no family
  // uses are ignored; missing required keys, and keys whose feature is not
  // implemented, are named in the error, with `origin` (the file path).
  static ModelConfig from_hf_json(const nlohmann::json& j, const std::string& origin);
  nlohmann::json to_hf_json() const;

  int64_t num_parameters() const;  // unique parameters (tied embeddings counted once)
  std::string describe() const;

  // Refuses (distllm::Error) a model whose f32 parameters need more than
  // `usable_bytes`, naming the field that makes it large. Computed from the config
  // alone, so it runs before anything is allocated.
  void check_fits(int64_t usable_bytes, const std::string& what) const;

  // Upper bounds on each field: far above any released model of these families,
  // low enough that every derived size fits the int row widths and int64 byte
  // counts without overflow. A config.json beyond them is refused by name.
  static constexpr int kMaxLayers = 1024;
  static constexpr int kMaxHeads = 1024;
  static constexpr int kMaxWidth = 1 << 16;         // n_embd
  static constexpr int kMaxHeadDim = 4096;
  static constexpr int kMaxIntermediate = 1 << 20;
  static constexpr int kMaxVocab = 1 << 22;
  static constexpr int kMaxPositions = 1 << 21;
};

}  // namespace distllm
