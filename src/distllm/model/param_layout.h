// The one parameter layout (DESIGN.md principle 3).
//
// All parameters live in a single flat float buffer made of contiguous groups:
//   group 0            "embed":    token embedding (+ learned positions)
//   groups 1..n_layer  "layer.i":  every tensor of transformer block i
//   group n_layer + 1  "head":     final norm (+ lm_head when not tied)
// Each group starts on a 64-byte boundary. Inside a group, tensors are packed back
// to back in the order the model's family lists them (model/families/), each a
// named view whose name and shape are exactly the Hugging Face ones, tagged with
// its role in the block (family.h). Gradients and optimizer moments use the same
// offsets, so sharding a layer is slicing its group's range and saving is writing
// the views. A block's fused matrices (Llama's q|k|v and gate|up) are adjacent
// tensors read as one [rows, C] matrix.
//
// A pipeline stage's layout keeps every group (so group numbers are the same on
// every stage) but leaves the groups it does not hold empty: no tensors, no floats.
// Under the interleaved schedule a stage holds several chunks of layers, with the
// other stages' groups empty between them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "distllm/kernels/matmul.h"
#include "distllm/model/config.h"
#include "distllm/model/family.h"
#include "distllm/model/stage_chunks.h"

namespace distllm {

struct ParamTensor {
  std::string name;              // Hugging Face name
  std::vector<int64_t> shape;    // Hugging Face shape
  int64_t offset = 0;            // into the flat buffer, in floats
  int64_t numel = 0;
  int group = 0;
  bool weight_decay = false;     // matrices and embeddings decay; norms and biases do not
  TensorRole role = TensorRole::kFusedPart;  // what it is in its block (family.h)
  TpSplit split = TpSplit::kReplicated;      // how tensor parallelism splits it
  int split_axis = 0;
};

struct ParamGroup {
  std::string name;  // "embed", "layer.3", "head"
  int64_t offset = 0;
  int64_t size = 0;  // floats, excluding the alignment padding after it
  std::vector<int> tensors;
};

// One block's tensors inside a flat buffer (parameters, gradients or optimizer
// moments: the same layout), as pointers (LayerTensors) or as flat offsets in
// floats (LayerOffsets: for weights that are not one f32 buffer, model_weights.h).
// Fields a family lacks are null, or -1.
template <typename T>
struct LayerFields {
  static constexpr T kNone = [] {
    if constexpr (std::is_pointer_v<T>) return T{nullptr};
    else return T{-1};
  }();
  T attn_norm_w = kNone;
  T attn_norm_b = kNone;
  T qkv_w = kNone;  // q|k|v: [C, (H+2KV)*D] (Conv1D) or [(H+2KV)*D, C] (Linear)
  T qkv_b = kNone;
  T attn_out_w = kNone;  // [H*D, C] (Conv1D) or [C, H*D] (Linear)
  T attn_out_b = kNone;
  T mlp_norm_w = kNone;
  T mlp_norm_b = kNone;
  T mlp_in_w = kNone;  // [C, I] (Conv1D) or [I or gate|up 2I, C] (Linear)
  T mlp_in_b = kNone;
  T mlp_out_w = kNone;  // [I, C] (Conv1D) or [C, I] (Linear)
  T mlp_out_b = kNone;
  T q_norm_w = kNone;  // [head_dim]: every query head's RMSNorm (qk_norm)
  T k_norm_w = kNone;
  T attn_post_norm_w = kNone;  // [C]: the norm of the attention branch's output (post_norms)
  T mlp_post_norm_w = kNone;   // [C]: the norm of the MLP branch's output

  // The same fields, each mapped by f (absent ones stay absent).
  template <typename U, typename F>
  LayerFields<U> map(F f) const {
    LayerFields<U> r;
    auto m = [&](T v) { return v == kNone ? LayerFields<U>::kNone : f(v); };
    r.attn_norm_w = m(attn_norm_w), r.attn_norm_b = m(attn_norm_b), r.qkv_w = m(qkv_w), r.qkv_b = m(qkv_b);
    r.attn_out_w = m(attn_out_w), r.attn_out_b = m(attn_out_b), r.mlp_norm_w = m(mlp_norm_w);
    r.mlp_norm_b = m(mlp_norm_b), r.mlp_in_w = m(mlp_in_w), r.mlp_in_b = m(mlp_in_b), r.mlp_out_w = m(mlp_out_w);
    r.mlp_out_b = m(mlp_out_b), r.q_norm_w = m(q_norm_w), r.k_norm_w = m(k_norm_w);
    r.attn_post_norm_w = m(attn_post_norm_w), r.mlp_post_norm_w = m(mlp_post_norm_w);
    return r;
  }
};
using LayerTensors = LayerFields<float*>;
using LayerOffsets = LayerFields<int64_t>;

struct EmbedTensors {
  float* wte = nullptr;
  float* wpe = nullptr;  // learned positions only
};

struct HeadTensors {
  float* norm_w = nullptr;
  float* norm_b = nullptr;
  float* lm_head = nullptr;  // [V, C]; points at wte when tied
};

// Flat offsets (floats) of the embedding and head tensors; -1 where absent.
struct EmbedHeadOffsets {
  int64_t wte = -1, wpe = -1;
  int64_t norm_w = -1, norm_b = -1;
  int64_t lm_head = -1;  // wte when tied
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);
  // The groups pipeline rank `stage` holds (the layers of all its chunks, the
  // embedding when it holds_embedding, the head with the last chunk); the others
  // are empty.
  ParamLayout(const ModelConfig& config, const StageChunks& stage);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  int64_t total_size() const { return total_; }  // floats, including padding
  int embed_group() const { return 0; }
  int layer_group(int layer) const { return 1 + layer; }
  int head_group() const { return static_cast<int>(groups_.size()) - 1; }
  bool has_group(int g) const { return !groups_.at(static_cast<size_t>(g)).tensors.empty(); }

  std::optional<int> find(const std::string& name) const;
  const ParamTensor& tensor(const std::string& name) const;  // throws if unknown

  // Flat offsets of one block's tensors and of the embedding and head tensors
  // (the one place that knows the order inside a group).
  LayerOffsets layer_offsets(int layer) const;
  const EmbedHeadOffsets& embed_head_offsets() const { return embed_head_; }
  // Views into a whole flat buffer.
  LayerTensors layer(float* base, int layer) const;
  EmbedTensors embed(float* base) const;
  HeadTensors head(float* base) const;

  // Views into one group's own buffer, whose element 0 is the group's first
  // parameter (a gathered or separately allocated group). A tied head reads the
  // embedding group, hence the second pointer.
  LayerTensors layer_view(float* group_base, int layer) const;
  EmbedTensors embed_view(float* group_base) const;
  HeadTensors head_view(float* head_base, float* embed_base) const;

  // The floats from group g's offset to the next group's (or the end): the group
  // plus its alignment padding. The spans of all groups tile the flat buffer.
  int64_t group_span(int g) const;
  // True when the output head reads the embedding group's parameters (tied).
  bool head_uses_embedding() const { return config_.tie_embeddings; }

  // Matmul layout of the block weights and the norm kind (the family's BlockSpec).
  kernels::WeightLayout linear_layout() const { return linear_layout_; }
  NormKind norm_kind() const { return norm_kind_; }

 private:
  ModelConfig config_;
  std::vector<ParamTensor> tensors_;
  std::vector<ParamGroup> groups_;
  int64_t total_ = 0;
  kernels::WeightLayout linear_layout_;
  NormKind norm_kind_;

  std::vector<LayerOffsets> layer_offsets_;  // per layer (fields -1 for layers not held)
  EmbedHeadOffsets embed_head_;
  std::vector<bool> keep_;  // per group, while building

  void begin_group(const std::string& name);
  void add(const TensorSpec& spec);
  float* at(float* base, const std::string& name) const;
};

// Copies every tensor of `to` that `from` also has (same name and size) from the
// flat buffer `src` (of `from`) to `dst` (of `to`), leaving the rest of `dst` as it
// is; tensors of group `skip_group` of `to` are left out.
void copy_common_tensors(const ParamLayout& from, const float* src, const ParamLayout& to, float* dst,
                         int skip_group = -1);

}  // namespace distllm
