// What a decoder block is made of (the norm, the MLP, the positions, how block
// matrices are stored): the training and inference graphs compose their blocks from
// this, never from the family's name. Each family (family.h) says which it uses.
#pragma once

#include "distllm/kernels/matmul.h"

namespace distllm {

enum class NormKind {
  kLayerNorm,
  kRmsNorm,
  kRmsNormPlusOne,  // x * rstd * (1 + w): Gemma's, the stored w an offset from the identity
};
enum class MlpKind {
  kGeluTanh,   // act(x W_in) W_out, GELU with the tanh approximation
  kSwiGlu,     // (silu(x W_gate) * (x W_up)) W_down, gate|up as one [2I, C] matrix
  kGeGluTanh,  // (gelu_tanh(x W_gate) * (x W_up)) W_down, stored as kSwiGlu's (Gemma)
};
enum class PositionKind { kLearned, kRotary };

// What a family's decoder block is made of; the graphs compose their blocks from it.
struct BlockSpec {
  NormKind norm = NormKind::kLayerNorm;
  MlpKind mlp = MlpKind::kGeluTanh;
  PositionKind positions = PositionKind::kLearned;
  // How the family stores block matrices: GPT-2's Conv1D [in, out] or Linear [out, in].
  kernels::WeightLayout linear_layout = kernels::WeightLayout::kOutIn;
  // RMSNorm of each head of q and k (weights [head_dim]) before the rotation (Qwen3).
  bool qk_norm = false;
  // "Sandwich" norms (Gemma 2/3): each branch's output is normed again before the
  // residual add, x + post_norm(branch(pre_norm(x))), with its own weights.
  bool post_norms = false;
  // The token embedding is multiplied by sqrt(n_embd) (Gemma; the tied head reads the
  // unscaled table).
  bool scaled_embedding = false;

  // W_in holds gate|up: 2I rows
  bool gated_mlp() const { return mlp == MlpKind::kSwiGlu || mlp == MlpKind::kGeGluTanh; }
  bool rotary() const { return positions == PositionKind::kRotary; }
  bool learned_positions() const { return positions == PositionKind::kLearned; }
};

}  // namespace distllm
