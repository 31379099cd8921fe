// RoPE scaling, as Hugging Face's config.json `rope_scaling` describes it: how a
// model trained on a shorter context stretches its rotary frequencies (Llama 3.1's
// "llama3", "linear" position interpolation, "dynamic" NTK, "yarn", Phi-3's
// "longrope"). The frequencies are transformers' (modeling_rope_utils.py), in
// float32, and the attention factor multiplies cos and sin as it does there.
//
// Two variants depend on the length of the sequence in transformers, which a paged
// KV cache (keys rotated once, when written) cannot follow. They are static here,
// as vLLM makes them: "dynamic" uses the NTK base for the whole extended context
// (max_position), and "longrope" rotates positions below original_max_position with
// the short factors and positions from it on with the long ones.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "distllm/kernels/rope.h"

namespace distllm {

struct ModelConfig;

struct RopeScaling {
  enum class Kind { kNone, kLinear, kDynamic, kLlama3, kYarn, kLongRope };
  Kind kind = Kind::kNone;
  double factor = 1.0;
  int original_max_position = 0;  // 0: the model's max_position (before scaling)
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  // yarn
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 0.0;  // yarn and longrope; 0: the variant's default
  // longrope (Phi-3): one factor per frequency
  std::vector<double> short_factor, long_factor;

  bool active() const { return kind != Kind::kNone; }
  std::string describe() const;  // "" without scaling, else e.g. "llama3 x8"
  bool operator==(const RopeScaling& o) const;
};

// Reads config.json's `rope_scaling` (absent or null: none). `max_position` is the
// config's max_position_embeddings (llama3 and yarn default their original context
// to it). Unknown types, and fields this code does not implement, are refused by name.
RopeScaling parse_rope_scaling(const nlohmann::json& config, int max_position, const std::string& origin);
// The `rope_scaling` object that parses back to `s`; null without scaling.
nlohmann::json rope_scaling_json(const RopeScaling& s);

// The inverse frequencies (and, for longrope, those for positions from the switch
// on) and the factor cos/sin are multiplied by.
struct RopeFrequencies {
  std::vector<float> inv_freq;
  std::vector<float> inv_freq_long;  // longrope only
  int switch_at = -1;                // longrope: the first position of the long factors
  float attention_factor = 1.0f;
};
RopeFrequencies rope_frequencies(const RopeScaling& s, int head_dim, double theta, int max_position);

// The cos/sin table of a rotary model for positions [0, positions): its theta and
// rope_scaling (the training graph builds one for its sequence, inference for the
// whole context). `local`: the table of the windowed layers of a model with a local
// RoPE base (ModelConfig::rope_local_theta; no scaling).
kernels::RopeTable rope_table(const ModelConfig& c, int positions, bool local = false);

}  // namespace distllm
