#include "distllm/model/param_layout.h"

#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/family.h"

namespace distllm {

namespace {
constexpr int64_t kGroupAlign = 16;  // floats: 64 bytes
}

void ParamLayout::begin_group(const std::string& name) {
  total_ = (total_ + kGroupAlign - 1) / kGroupAlign * kGroupAlign;
  ParamGroup g;
  g.name = name;
  g.offset = total_;
  groups_.push_back(g);
}

void ParamLayout::add(const TensorSpec& spec) {
  if (!keep_.at(groups_.size() - 1)) return;  // a group this pipeline stage does not hold
  ParamTensor t;
  t.name = spec.name;
  t.numel = 1;
  for (int64_t d : spec.shape) t.numel *= d;
  t.shape = spec.shape;
  t.offset = total_;
  t.group = static_cast<int>(groups_.size()) - 1;
  t.weight_decay = spec.weight_decay;
  t.role = spec.role;
  t.split = spec.split;
  t.split_axis = spec.split_axis;
  total_ += t.numel;
  groups_.back().tensors.push_back(static_cast<int>(tensors_.size()));
  groups_.back().size = total_ - groups_.back().offset;
  tensors_.push_back(std::move(t));
}

namespace {

// The field of a block that a role fills; nullptr for roles outside blocks.
int64_t* layer_field(LayerOffsets& o, TensorRole role) {
  switch (role) {
    case TensorRole::kAttnNormWeight: return &o.attn_norm_w;
    case TensorRole::kAttnNormBias: return &o.attn_norm_b;
    case TensorRole::kQkvWeight: return &o.qkv_w;
    case TensorRole::kQkvBias: return &o.qkv_b;
    case TensorRole::kAttnOutWeight: return &o.attn_out_w;
    case TensorRole::kAttnOutBias: return &o.attn_out_b;
    case TensorRole::kMlpNormWeight: return &o.mlp_norm_w;
    case TensorRole::kMlpNormBias: return &o.mlp_norm_b;
    case TensorRole::kMlpInWeight: return &o.mlp_in_w;
    case TensorRole::kMlpInBias: return &o.mlp_in_b;
    case TensorRole::kMlpOutWeight: return &o.mlp_out_w;
    case TensorRole::kMlpOutBias: return &o.mlp_out_b;
    case TensorRole::kQNormWeight: return &o.q_norm_w;
    case TensorRole::kKNormWeight: return &o.k_norm_w;
    case TensorRole::kAttnPostNormWeight: return &o.attn_post_norm_w;
    case TensorRole::kMlpPostNormWeight: return &o.mlp_post_norm_w;
    default: return nullptr;
  }
}

int64_t* embed_head_field(EmbedHeadOffsets& o, TensorRole role) {
  switch (role) {
    case TensorRole::kTokenEmbedding: return &o.wte;
    case TensorRole::kPositionEmbedding: return &o.wpe;
    case TensorRole::kFinalNormWeight: return &o.norm_w;
    case TensorRole::kFinalNormBias: return &o.norm_b;
    case TensorRole::kLmHead: return &o.lm_head;
    default: return nullptr;
  }
}

}  // namespace

ParamLayout::ParamLayout(const ModelConfig& c) : ParamLayout(c, StageRange::whole(c.n_layer)) {}

ParamLayout::ParamLayout(const ModelConfig& c, const StageChunks& stage) : config_(c) {
  DL_CHECK(stage.n_layer() == c.n_layer, "pipeline stage of a %d-layer model used with a %d-layer one", stage.n_layer(),
           c.n_layer);
  const FamilyDef& family = family_def(c.family);
  linear_layout_ = c.block().linear_layout;
  norm_kind_ = c.block().norm;
  keep_.push_back(stage.holds_embedding(c.tie_embeddings));
  for (int i = 0; i < c.n_layer; ++i) keep_.push_back(stage.has_layer(i));
  keep_.push_back(stage.last());
  begin_group("embed");
  for (const TensorSpec& t : family.embed_tensors(c)) add(t);
  layer_offsets_.resize(static_cast<size_t>(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    begin_group(strprintf("layer.%d", i));
    for (const TensorSpec& t : family.layer_tensors(c, i)) {
      int64_t* field = layer_field(layer_offsets_[static_cast<size_t>(i)], t.role);
      DL_CHECK(field || t.role == TensorRole::kFusedPart, "internal error: %s in a block has a role outside it",
               t.name.c_str());
      if (field && keep_[groups_.size() - 1]) *field = total_;  // the offset add() gives it
      add(t);
    }
  }
  begin_group("head");
  for (const TensorSpec& t : family.head_tensors(c)) add(t);
  for (const ParamTensor& t : tensors_) {
    if (t.group != embed_group() && t.group != head_group()) continue;
    int64_t* field = embed_head_field(embed_head_, t.role);
    DL_CHECK(field != nullptr, "internal error: %s outside the blocks has a block's role", t.name.c_str());
    *field = t.offset;
  }
  if (c.tie_embeddings) embed_head_.lm_head = embed_head_.wte;
  total_ = (total_ + kGroupAlign - 1) / kGroupAlign * kGroupAlign;
  keep_.clear();
}

std::optional<int> ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return std::nullopt;
}

const ParamTensor& ParamLayout::tensor(const std::string& name) const {
  auto i = find(name);
  DL_CHECK(i.has_value(), "no parameter named '%s'", name.c_str());
  return tensors_[*i];
}

float* ParamLayout::at(float* base, const std::string& name) const { return base + tensor(name).offset; }

LayerTensors ParamLayout::layer(float* base, int i) const {
  return layer_view(base + groups_.at(layer_group(i)).offset, i);
}

EmbedTensors ParamLayout::embed(float* base) const { return embed_view(base + groups_.at(embed_group()).offset); }

HeadTensors ParamLayout::head(float* base) const {
  return head_view(base + groups_.at(head_group()).offset, base + groups_.at(embed_group()).offset);
}

int64_t ParamLayout::group_span(int g) const {
  const size_t i = static_cast<size_t>(g);
  int64_t end = i + 1 < groups_.size() ? groups_[i + 1].offset : total_;
  return end - groups_.at(i).offset;
}

LayerOffsets ParamLayout::layer_offsets(int i) const {
  DL_CHECK(has_group(layer_group(i)), "internal error: layer %d is not in this layout", i);
  return layer_offsets_.at(static_cast<size_t>(i));
}

LayerTensors ParamLayout::layer_view(float* group_base, int i) const {
  const int64_t group_offset = groups_.at(layer_group(i)).offset;
  return layer_offsets(i).map<float*>([&](int64_t off) { return group_base + (off - group_offset); });
}

EmbedTensors ParamLayout::embed_view(float* group_base) const {
  EmbedTensors e;
  const EmbedHeadOffsets& o = embed_head_;
  const int64_t group_offset = groups_.at(embed_group()).offset;
  e.wte = group_base + (o.wte - group_offset);
  if (o.wpe >= 0) e.wpe = group_base + (o.wpe - group_offset);
  return e;
}

HeadTensors ParamLayout::head_view(float* head_base, float* embed_base) const {
  HeadTensors h;
  const EmbedHeadOffsets& o = embed_head_;
  const int64_t group_offset = groups_.at(head_group()).offset;
  h.norm_w = head_base + (o.norm_w - group_offset);
  if (o.norm_b >= 0) h.norm_b = head_base + (o.norm_b - group_offset);
  h.lm_head = config_.tie_embeddings ? (embed_base ? embed_view(embed_base).wte : nullptr)
                                     : head_base + (o.lm_head - group_offset);
  return h;
}

void copy_common_tensors(const ParamLayout& from, const float* src, const ParamLayout& to, float* dst,
                         int skip_group) {
  for (const ParamTensor& t : to.tensors()) {
    if (t.group == skip_group) continue;
    auto k = from.find(t.name);
    if (!k) continue;
    const ParamTensor& f = from.tensors()[static_cast<size_t>(*k)];
    DL_CHECK(f.numel == t.numel, "%s has %lld elements in one layout and %lld in the other", t.name.c_str(),
             (long long)f.numel, (long long)t.numel);
    std::memcpy(dst + t.offset, src + f.offset, sizeof(float) * static_cast<size_t>(t.numel));
  }
}

}  // namespace distllm
