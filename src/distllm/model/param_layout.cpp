#include "distllm/model/param_layout.h"

#include <cstring>

#include "distllm/base/error.h"

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

void ParamLayout::add(const std::string& name, std::vector<int64_t> shape, bool decay) {
  if (!keep_.at(groups_.size() - 1)) return;  // a group this pipeline stage does not hold
  ParamTensor t;
  t.name = name;
  t.numel = 1;
  for (int64_t d : shape) t.numel *= d;
  t.shape = std::move(shape);
  t.offset = total_;
  t.group = static_cast<int>(groups_.size()) - 1;
  t.weight_decay = decay;
  total_ += t.numel;
  groups_.back().tensors.push_back(static_cast<int>(tensors_.size()));
  groups_.back().size = total_ - groups_.back().offset;
  tensors_.push_back(std::move(t));
}

ParamLayout::ParamLayout(const ModelConfig& c) : ParamLayout(c, StageRange::whole(c.n_layer)) {}

ParamLayout::ParamLayout(const ModelConfig& c, const StageChunks& stage) : config_(c) {
  DL_CHECK(stage.n_layer() == c.n_layer, "pipeline stage of a %d-layer model used with a %d-layer one", stage.n_layer(),
           c.n_layer);
  keep_.push_back(stage.holds_embedding(c.tie_embeddings));
  for (int i = 0; i < c.n_layer; ++i) keep_.push_back(stage.has_layer(i));
  keep_.push_back(stage.last());
  const int64_t V = c.vocab_size, C = c.n_embd, P = c.max_position, I = c.intermediate_size;
  const int64_t A = c.attn_dim(), KVD = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  if (c.is_gpt2()) {
    linear_layout_ = kernels::WeightLayout::kInOut;
    begin_group("embed");
    add("transformer.wte.weight", {V, C}, true);
    add("transformer.wpe.weight", {P, C}, true);
    for (int i = 0; i < c.n_layer; ++i) {
      begin_group(strprintf("layer.%d", i));
      std::string p = strprintf("transformer.h.%d.", i);
      add(p + "ln_1.weight", {C}, false);
      add(p + "ln_1.bias", {C}, false);
      // 3C and C for a whole model; a tensor-parallel shard's own heads otherwise.
      add(p + "attn.c_attn.weight", {C, c.qkv_dim()}, true);
      add(p + "attn.c_attn.bias", {c.qkv_dim()}, false);
      add(p + "attn.c_proj.weight", {A, C}, true);
      add(p + "attn.c_proj.bias", {C}, false);
      add(p + "ln_2.weight", {C}, false);
      add(p + "ln_2.bias", {C}, false);
      add(p + "mlp.c_fc.weight", {C, I}, true);
      add(p + "mlp.c_fc.bias", {I}, false);
      add(p + "mlp.c_proj.weight", {I, C}, true);
      add(p + "mlp.c_proj.bias", {C}, false);
    }
    begin_group("head");
    add("transformer.ln_f.weight", {C}, false);
    add("transformer.ln_f.bias", {C}, false);
  } else {
    linear_layout_ = kernels::WeightLayout::kOutIn;
    begin_group("embed");
    add("model.embed_tokens.weight", {V, C}, true);
    for (int i = 0; i < c.n_layer; ++i) {
      begin_group(strprintf("layer.%d", i));
      std::string p = strprintf("model.layers.%d.", i);
      add(p + "input_layernorm.weight", {C}, false);
      add(p + "self_attn.q_proj.weight", {A, C}, true);
      add(p + "self_attn.k_proj.weight", {KVD, C}, true);
      add(p + "self_attn.v_proj.weight", {KVD, C}, true);
      add(p + "self_attn.o_proj.weight", {C, A}, true);
      add(p + "post_attention_layernorm.weight", {C}, false);
      add(p + "mlp.gate_proj.weight", {I, C}, true);
      add(p + "mlp.up_proj.weight", {I, C}, true);
      add(p + "mlp.down_proj.weight", {C, I}, true);
    }
    begin_group("head");
    add("model.norm.weight", {C}, false);
    if (!c.tie_embeddings) add("lm_head.weight", {V, C}, true);
  }
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
  LayerOffsets t;
  const ParamGroup& g = groups_.at(layer_group(i));
  auto off = [&](int k) { return tensors_[g.tensors.at(k)].offset; };
  if (config_.is_gpt2()) {
    t.attn_norm_w = off(0), t.attn_norm_b = off(1);
    t.qkv_w = off(2), t.qkv_b = off(3);
    t.attn_out_w = off(4), t.attn_out_b = off(5);
    t.mlp_norm_w = off(6), t.mlp_norm_b = off(7);
    t.mlp_in_w = off(8), t.mlp_in_b = off(9);
    t.mlp_out_w = off(10), t.mlp_out_b = off(11);
  } else {
    t.attn_norm_w = off(0);
    t.qkv_w = off(1);  // q_proj, then k_proj and v_proj right after it
    t.attn_out_w = off(4);
    t.mlp_norm_w = off(5);
    t.mlp_in_w = off(6);  // gate_proj, then up_proj right after it
    t.mlp_out_w = off(8);
  }
  return t;
}

EmbedHeadOffsets ParamLayout::embed_head_offsets() const {
  EmbedHeadOffsets o;
  const ParamGroup& e = groups_.at(embed_group());
  if (!e.tensors.empty()) {
    o.wte = tensors_[e.tensors[0]].offset;
    if (config_.is_gpt2()) o.wpe = tensors_[e.tensors[1]].offset;
  }
  const ParamGroup& h = groups_.at(head_group());
  if (!h.tensors.empty()) {
    o.norm_w = tensors_[h.tensors[0]].offset;
    if (config_.is_gpt2()) o.norm_b = tensors_[h.tensors[1]].offset;
    if (!config_.tie_embeddings) o.lm_head = tensors_[h.tensors[config_.is_gpt2() ? 2 : 1]].offset;
  }
  if (config_.tie_embeddings) o.lm_head = o.wte;
  return o;
}

LayerTensors ParamLayout::layer_view(float* group_base, int i) const {
  const int64_t group_offset = groups_.at(layer_group(i)).offset;
  return layer_offsets(i).map<float*>([&](int64_t off) { return group_base + (off - group_offset); });
}

EmbedTensors ParamLayout::embed_view(float* group_base) const {
  EmbedTensors e;
  const EmbedHeadOffsets o = embed_head_offsets();
  const int64_t group_offset = groups_.at(embed_group()).offset;
  e.wte = group_base + (o.wte - group_offset);
  if (o.wpe >= 0) e.wpe = group_base + (o.wpe - group_offset);
  return e;
}

HeadTensors ParamLayout::head_view(float* head_base, float* embed_base) const {
  HeadTensors h;
  const EmbedHeadOffsets o = embed_head_offsets();
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
