#include "distllm/model/train_graph.h"

#include <cmath>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/kernels/activation.h"
#include "distllm/kernels/attention.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/vec.h"

namespace distllm {

using namespace kernels;

namespace {

// The output head runs over chunks of rows so the [rows, vocab] logits never need
// more than about 256 MB, yet each chunk is big enough that the weight-gradient
// sgemm (inner dimension = rows) runs efficiently and the [vocab, C] gradient is
// read and written only a few times per step.
int64_t head_chunk_rows(int64_t rows, int vocab) {
  int64_t fit = (int64_t(256) << 20) / (static_cast<int64_t>(vocab) * 4);
  return std::min(rows, std::max<int64_t>(64, fit));
}

void alloc(AlignedBuffer<float>& b, int64_t n) { b.resize(static_cast<size_t>(n)); }

}  // namespace

TrainGraph::TrainGraph(const ModelConfig& config, int batch, int seq_len)
    : cfg_(config), B_(batch), T_(seq_len), BT_(static_cast<int64_t>(batch) * seq_len) {
  cfg_.validate();
  DL_CHECK(batch > 0, "batch size must be positive, got %d", batch);
  DL_CHECK(seq_len > 0, "sequence length must be positive, got %d", seq_len);
  DL_CHECK(seq_len <= cfg_.max_position, "sequence length %d exceeds the model's context (%d)", seq_len,
           cfg_.max_position);
  if (!cfg_.is_gpt2()) rope_ = RopeTable(cfg_.head_dim, seq_len, cfg_.rope_theta);
  const int64_t C = cfg_.n_embd;
  positions_.resize(BT_);
  for (int64_t i = 0; i < BT_; ++i) positions_[i] = static_cast<int32_t>(i % T_);
  tokens_.resize(BT_);
  layers_.resize(cfg_.n_layer);
  for (auto& a : layers_) {
    alloc(a.input, BT_ * C);
    alloc(a.norm1, BT_ * C);
    alloc(a.norm1_mean, BT_);
    alloc(a.norm1_rstd, BT_);
    alloc(a.qkv, BT_ * cfg_.qkv_dim());
    alloc(a.attn, BT_ * cfg_.attn_dim());
    alloc(a.lse, static_cast<int64_t>(B_) * cfg_.n_head * T_);
    alloc(a.mid, BT_ * C);
    alloc(a.norm2, BT_ * C);
    alloc(a.norm2_mean, BT_);
    alloc(a.norm2_rstd, BT_);
    alloc(a.mlp_in, BT_ * cfg_.mlp_in_dim());
    alloc(a.mlp_act, BT_ * cfg_.mlp_act_dim());
  }
  alloc(final_input_, BT_ * C);
  alloc(final_norm_, BT_ * C);
  alloc(final_mean_, BT_);
  alloc(final_rstd_, BT_);
  alloc(losses_, BT_);
  alloc(dresid_, BT_ * C);
  alloc(dnorm_, BT_ * C);
  alloc(dqkv_, BT_ * cfg_.qkv_dim());
  alloc(dattn_, BT_ * cfg_.attn_dim());
  alloc(dmlp_in_, BT_ * cfg_.mlp_in_dim());
  alloc(dmlp_act_, BT_ * cfg_.mlp_act_dim());
  alloc(logits_chunk_, head_chunk_rows(BT_, cfg_.vocab_size) * cfg_.vocab_size);
}

size_t TrainGraph::activation_bytes() const {
  size_t n = 0;
  for (const auto& a : layers_)
    n += a.input.size() + a.norm1.size() + a.norm1_mean.size() + a.norm1_rstd.size() + a.qkv.size() +
         a.attn.size() + a.lse.size() + a.mid.size() + a.norm2.size() + a.norm2_mean.size() + a.norm2_rstd.size() +
         a.mlp_in.size() + a.mlp_act.size();
  n += final_input_.size() + final_norm_.size() + final_mean_.size() + final_rstd_.size() + losses_.size();
  n += dresid_.size() + dnorm_.size() + dqkv_.size() + dattn_.size() + dmlp_in_.size() + dmlp_act_.size() +
       logits_chunk_.size();
  return n * sizeof(float);
}

void TrainGraph::norm_forward(bool first, const LayerTensors& w, const float* in, float* out, float* mean,
                              float* rstd) const {
  const float* weight = first ? w.attn_norm_w : w.mlp_norm_w;
  const float* bias = first ? w.attn_norm_b : w.mlp_norm_b;
  if (cfg_.is_gpt2()) {
    layernorm_forward(out, mean, rstd, in, weight, bias, BT_, cfg_.n_embd, cfg_.norm_eps);
  } else {
    rmsnorm_forward(out, rstd, in, weight, BT_, cfg_.n_embd, cfg_.norm_eps);
  }
}

namespace {

AttentionArgs attention_args(const ModelConfig& cfg, int B, int T, float* qkv, float* out, float* lse) {
  AttentionArgs a;
  a.batch = B;
  a.n_head = cfg.n_head;
  a.n_kv_head = cfg.n_kv_head;
  a.head_dim = cfg.head_dim;
  a.q_len = a.kv_len = T;
  a.scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
  const int64_t row = cfg.qkv_dim();
  a.q = qkv;
  a.k = qkv + cfg.attn_dim();
  a.v = qkv + cfg.attn_dim() + static_cast<int64_t>(cfg.n_kv_head) * cfg.head_dim;
  a.q_row_stride = a.kv_row_stride = row;
  a.q_batch_stride = a.kv_batch_stride = row * T;
  a.out = out;
  a.out_row_stride = cfg.attn_dim();
  a.out_batch_stride = static_cast<int64_t>(cfg.attn_dim()) * T;
  a.lse = lse;
  return a;
}

}  // namespace

void TrainGraph::layer_forward(const LayerTensors& w, LayerActs& a, float* out) {
  const int C = cfg_.n_embd;
  const WeightLayout lay = cfg_.is_gpt2() ? WeightLayout::kInOut : WeightLayout::kOutIn;
  {
    DL_PROFILE("fwd.norm");
    norm_forward(true, w, a.input.data(), a.norm1.data(), a.norm1_mean.data(), a.norm1_rstd.data());
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.qkv.data(), a.norm1.data(), w.qkv_w, w.qkv_b, BT_, C, cfg_.qkv_dim(), lay);
  }
  if (!cfg_.is_gpt2()) {
    DL_PROFILE("fwd.rope");
    rope_apply(a.qkv.data(), BT_, cfg_.qkv_dim(), cfg_.n_head, positions_.data(), rope_, false);
    rope_apply(a.qkv.data() + cfg_.attn_dim(), BT_, cfg_.qkv_dim(), cfg_.n_kv_head, positions_.data(), rope_, false);
  }
  {
    DL_PROFILE("fwd.attention");
    attention_forward(attention_args(cfg_, B_, T_, a.qkv.data(), a.attn.data(), a.lse.data()));
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.mid.data(), a.attn.data(), w.attn_out_w, w.attn_out_b, BT_, cfg_.attn_dim(), C, lay);
  }
  {
    DL_PROFILE("fwd.residual");
    add_inplace(a.mid.data(), a.input.data(), BT_ * C);
  }
  {
    DL_PROFILE("fwd.norm");
    norm_forward(false, w, a.mid.data(), a.norm2.data(), a.norm2_mean.data(), a.norm2_rstd.data());
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.mlp_in.data(), a.norm2.data(), w.mlp_in_w, w.mlp_in_b, BT_, C, cfg_.mlp_in_dim(), lay);
  }
  if (cfg_.is_gpt2()) {
    DL_PROFILE("fwd.activation");
    gelu_forward(a.mlp_act.data(), a.mlp_in.data(), BT_ * cfg_.mlp_act_dim());
  } else {
    DL_PROFILE("fwd.activation");
    swiglu_forward(a.mlp_act.data(), a.mlp_in.data(), BT_, cfg_.intermediate_size);
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(out, a.mlp_act.data(), w.mlp_out_w, w.mlp_out_b, BT_, cfg_.mlp_act_dim(), C, lay);
  }
  {
    DL_PROFILE("fwd.residual");
    add_inplace(out, a.mid.data(), BT_ * C);
  }
}

float TrainGraph::forward(Transformer& model, const int32_t* tokens, const int32_t* targets, bool compute_grad,
                          float grad_scale, float* logits_out, const TrainHooks* hooks) {
  const ParamLayout& layout = model.layout();
  const int C = cfg_.n_embd;
  for (int64_t i = 0; i < BT_; ++i) {
    DL_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "token id %d at position %lld is outside the vocabulary [0, %d)",
             tokens[i], (long long)i, cfg_.vocab_size);
    DL_CHECK(targets[i] == kIgnoreIndex || (targets[i] >= 0 && targets[i] < cfg_.vocab_size),
             "target id %d at position %lld is outside the vocabulary [0, %d)", targets[i], (long long)i,
             cfg_.vocab_size);
  }
  std::memcpy(tokens_.data(), tokens, sizeof(int32_t) * BT_);
  auto before = [&](int group) {
    if (hooks && hooks->before_group_forward) hooks->before_group_forward(group);
  };

  before(layout.embed_group());
  EmbedTensors emb = layout.embed(model.params());
  float* first = cfg_.n_layer > 0 ? layers_[0].input.data() : final_input_.data();
  embedding_forward(first, tokens, positions_.data(), emb.wte, emb.wpe, BT_, C);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    before(layout.layer_group(l));
    float* out = l + 1 < cfg_.n_layer ? layers_[l + 1].input.data() : final_input_.data();
    layer_forward(layout.layer(model.params(), l), layers_[l], out);
  }
  before(layout.head_group());
  if (compute_grad && !model.has_grads()) model.zero_grad();
  float loss = head_forward(model, targets, compute_grad, grad_scale, logits_out);
  grad_pending_ = compute_grad;
  return loss;
}

float TrainGraph::head_forward(Transformer& model, const int32_t* targets, bool compute_grad, float grad_scale,
                               float* logits_out) {
  const ParamLayout& layout = model.layout();
  const int C = cfg_.n_embd, V = cfg_.vocab_size;
  HeadTensors head = layout.head(model.params());
  if (cfg_.is_gpt2()) {
    layernorm_forward(final_norm_.data(), final_mean_.data(), final_rstd_.data(), final_input_.data(), head.norm_w,
                      head.norm_b, BT_, C, cfg_.norm_eps);
  } else {
    rmsnorm_forward(final_norm_.data(), final_rstd_.data(), final_input_.data(), head.norm_w, BT_, C, cfg_.norm_eps);
  }
  valid_targets_ = 0;
  for (int64_t i = 0; i < BT_; ++i) valid_targets_ += targets[i] != kIgnoreIndex;
  float ce_scale = valid_targets_ > 0 ? grad_scale / static_cast<float>(valid_targets_) : 0.0f;
  HeadTensors dhead;
  if (compute_grad) {
    dhead = layout.head(model.grads());
    dnorm_.zero();
  }
  const int64_t chunk = head_chunk_rows(BT_, V);
  for (int64_t r0 = 0; r0 < BT_; r0 += chunk) {
    int64_t rows = std::min(chunk, BT_ - r0);
    float* logits = logits_chunk_.data();
    const float* x = final_norm_.data() + r0 * C;
    {
      DL_PROFILE("head.matmul");
      matmul_forward(logits, x, head.lm_head, nullptr, rows, C, V, WeightLayout::kOutIn);
    }
    if (logits_out) std::memcpy(logits_out + r0 * V, logits, sizeof(float) * rows * V);
    if (!compute_grad) {
      cross_entropy_forward(losses_.data() + r0, logits, targets + r0, rows, V);
      continue;
    }
    {
      DL_PROFILE("head.cross_entropy");
      cross_entropy_forward_backward(losses_.data() + r0, logits, targets + r0, rows, V, ce_scale);
    }
    DL_PROFILE("head.matmul_bwd");
    matmul_backward_input(dnorm_.data() + r0 * C, logits, head.lm_head, rows, C, V, WeightLayout::kOutIn);
    matmul_backward_weight(dhead.lm_head, nullptr, logits, x, rows, C, V, WeightLayout::kOutIn);
  }
  double total = 0.0;
  for (int64_t i = 0; i < BT_; ++i) total += losses_[i];
  return valid_targets_ > 0 ? static_cast<float>(total / static_cast<double>(valid_targets_)) : 0.0f;
}

void TrainGraph::layer_backward(const LayerTensors& w, const LayerTensors& g, LayerActs& a) {
  const int C = cfg_.n_embd;
  const WeightLayout lay = cfg_.is_gpt2() ? WeightLayout::kInOut : WeightLayout::kOutIn;
  float* dresid = dresid_.data();  // d(layer output) on entry, d(layer input) on exit

  // MLP branch: out = mid + mlp_out(act(mlp_in(norm2(mid))))
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dmlp_act_.data(), dresid, w.mlp_out_w, BT_, cfg_.mlp_act_dim(), C, lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.mlp_out_w, g.mlp_out_b, dresid, a.mlp_act.data(), BT_, cfg_.mlp_act_dim(), C, lay);
  }
  if (cfg_.is_gpt2()) {
    {
    DL_PROFILE("bwd.activation");
    gelu_backward(dmlp_in_.data(), a.mlp_in.data(), dmlp_act_.data(), BT_ * cfg_.mlp_act_dim());
  }
  } else {
    {
    DL_PROFILE("bwd.activation");
    swiglu_backward(dmlp_in_.data(), a.mlp_in.data(), dmlp_act_.data(), BT_, cfg_.intermediate_size);
  }
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dnorm_.data(), dmlp_in_.data(), w.mlp_in_w, BT_, C, cfg_.mlp_in_dim(), lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.mlp_in_w, g.mlp_in_b, dmlp_in_.data(), a.norm2.data(), BT_, C, cfg_.mlp_in_dim(), lay);
  }
  if (cfg_.is_gpt2()) {
    {
    DL_PROFILE("bwd.norm");
    layernorm_backward(dresid, g.mlp_norm_w, g.mlp_norm_b, dnorm_.data(), a.mid.data(), w.mlp_norm_w,
                       a.norm2_mean.data(), a.norm2_rstd.data(), BT_, C);
  }
  } else {
    {
    DL_PROFILE("bwd.norm");
    rmsnorm_backward(dresid, g.mlp_norm_w, dnorm_.data(), a.mid.data(), w.mlp_norm_w, a.norm2_rstd.data(), BT_, C);
  }
  }

  // Attention branch: mid = input + attn_out(attention(qkv(norm1(input))))
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dattn_.data(), dresid, w.attn_out_w, BT_, cfg_.attn_dim(), C, lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.attn_out_w, g.attn_out_b, dresid, a.attn.data(), BT_, cfg_.attn_dim(), C, lay);
  }
  AttentionArgs args = attention_args(cfg_, B_, T_, a.qkv.data(), a.attn.data(), a.lse.data());
  const int64_t kv_off = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  float* dq = dqkv_.data();
  float* dk = dq + cfg_.attn_dim();
  float* dv = dk + kv_off;
  {
    DL_PROFILE("bwd.attention");
    attention_backward(args, AttentionGrads{dq, dk, dv, dattn_.data()});
  }
  if (!cfg_.is_gpt2()) {
    {
    DL_PROFILE("bwd.rope");
    rope_apply(dq, BT_, cfg_.qkv_dim(), cfg_.n_head, positions_.data(), rope_, true);
  }
    {
    DL_PROFILE("bwd.rope");
    rope_apply(dk, BT_, cfg_.qkv_dim(), cfg_.n_kv_head, positions_.data(), rope_, true);
  }
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dnorm_.data(), dqkv_.data(), w.qkv_w, BT_, C, cfg_.qkv_dim(), lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.qkv_w, g.qkv_b, dqkv_.data(), a.norm1.data(), BT_, C, cfg_.qkv_dim(), lay);
  }
  if (cfg_.is_gpt2()) {
    {
    DL_PROFILE("bwd.norm");
    layernorm_backward(dresid, g.attn_norm_w, g.attn_norm_b, dnorm_.data(), a.input.data(), w.attn_norm_w,
                       a.norm1_mean.data(), a.norm1_rstd.data(), BT_, C);
  }
  } else {
    {
    DL_PROFILE("bwd.norm");
    rmsnorm_backward(dresid, g.attn_norm_w, dnorm_.data(), a.input.data(), w.attn_norm_w, a.norm1_rstd.data(), BT_,
                     C);
  }
  }
}

void TrainGraph::backward(Transformer& model, const TrainHooks* hooks) {
  DL_CHECK(grad_pending_, "backward() needs a forward(compute_grad=true) first");
  grad_pending_ = false;
  const ParamLayout& layout = model.layout();
  const int C = cfg_.n_embd;
  auto ready = [&](int group) {
    if (hooks && hooks->group_grads_ready) hooks->group_grads_ready(group);
  };
  // Final norm: dnorm_ holds d(final_norm) from the head.
  HeadTensors head = layout.head(model.params());
  HeadTensors dhead = layout.head(model.grads());
  dresid_.zero();
  if (cfg_.is_gpt2()) {
    layernorm_backward(dresid_.data(), dhead.norm_w, dhead.norm_b, dnorm_.data(), final_input_.data(), head.norm_w,
                       final_mean_.data(), final_rstd_.data(), BT_, C);
  } else {
    rmsnorm_backward(dresid_.data(), dhead.norm_w, dnorm_.data(), final_input_.data(), head.norm_w,
                     final_rstd_.data(), BT_, C);
  }
  ready(layout.head_group());
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    layer_backward(layout.layer(model.params(), l), layout.layer(model.grads(), l), layers_[l]);
    ready(layout.layer_group(l));
  }
  EmbedTensors demb = layout.embed(model.grads());
  {
    DL_PROFILE("bwd.embedding");
    embedding_backward(demb.wte, demb.wpe, dresid_.data(), tokens_.data(), positions_.data(), BT_, C);
  }
  ready(layout.embed_group());
}

}  // namespace distllm
