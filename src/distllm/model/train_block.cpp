#include "distllm/model/train_block.h"

#include "distllm/base/profiler.h"
#include "distllm/kernels/vec.h"
#include "distllm/model/block_ops.h"

namespace distllm {

using namespace kernels;

namespace {

void alloc_floats(AlignedBuffer<float>& b, int64_t n) { b.resize(static_cast<size_t>(n)); }

}  // namespace

size_t BlockActs::bytes() const {
  return (norm1.size() + norm1_mean.size() + norm1_rstd.size() + qkv.size() + qk_saved.size() + qk_rstd.size() +
          attn.size() + lse.size() + mid.size() + norm2.size() + norm2_mean.size() + norm2_rstd.size() + mlp_in.size() +
          mlp_act.size() + attn_proj.size() + attn_post_rstd.size() + mlp_proj.size() + mlp_post_rstd.size()) *
         sizeof(float);
}

size_t BlockScratch::bytes() const {
  return (dnorm.size() + dqkv.size() + dattn.size() + dmlp_in.size() + dmlp_act.size() + dpost.size()) * sizeof(float);
}

TrainBlock::TrainBlock(const ModelConfig& shard, int64_t BT, ParallelLayers& par, TrainAttention& attention,
                       BlockScratch& scratch)
    : cfg_(shard),
      mlp_(shard.block().mlp),
      post_norms_(shard.block().post_norms),
      qk_plus_one_(shard.block().qk_norm && shard.block().norm == NormKind::kRmsNormPlusOne),
      BT_(BT),
      par_(par),
      attention_(attention),
      s_(scratch),
      mode_{shard.block().linear_layout, ComputeDtype::kF32} {
  if (qk_plus_one_) qk_weights_.resize(static_cast<size_t>(2 * shard.head_dim));
}

void TrainBlock::alloc(BlockActs& a) const {
  const int64_t C = cfg_.n_embd, rows = par_.rows();
  alloc_floats(a.norm1, BT_ * C);
  alloc_floats(a.norm1_mean, rows);
  alloc_floats(a.norm1_rstd, rows);
  alloc_floats(a.qkv, BT_ * cfg_.qkv_dim());
  alloc_floats(a.qk_saved, attention_.qk_saved_floats());
  alloc_floats(a.qk_rstd, attention_.qk_rstd_floats());
  alloc_floats(a.attn, BT_ * cfg_.attn_dim());
  alloc_floats(a.lse, BT_ * cfg_.n_head);  // [B, H, T]
  alloc_floats(a.mid, rows * C);
  alloc_floats(a.norm2, BT_ * C);
  alloc_floats(a.norm2_mean, rows);
  alloc_floats(a.norm2_rstd, rows);
  alloc_floats(a.mlp_in, BT_ * cfg_.mlp_in_dim());
  alloc_floats(a.mlp_act, BT_ * cfg_.mlp_act_dim());
  if (post_norms_) {
    alloc_floats(a.attn_proj, rows * C);
    alloc_floats(a.attn_post_rstd, rows);
    alloc_floats(a.mlp_proj, rows * C);
    alloc_floats(a.mlp_post_rstd, rows);
  }
}

void TrainBlock::alloc(BlockScratch& s) const {
  alloc_floats(s.dnorm, BT_ * cfg_.n_embd);
  alloc_floats(s.dqkv, BT_ * cfg_.qkv_dim());
  alloc_floats(s.dattn, BT_ * cfg_.attn_dim());
  alloc_floats(s.dmlp_in, BT_ * cfg_.mlp_in_dim());
  alloc_floats(s.dmlp_act, BT_ * cfg_.mlp_act_dim());
  if (post_norms_) alloc_floats(s.dpost, par_.rows() * cfg_.n_embd);
}

QkNorm TrainBlock::qk_norm(const LayerTensors& w, BlockActs& a) {
  if (w.q_norm_w == nullptr) return {};
  if (!qk_plus_one_) return {w.q_norm_w, w.k_norm_w, a.qk_saved.data(), a.qk_rstd.data()};
  // The per-head norm kernels scale by their weight: they get 1 + w. The gradient
  // of 1 + w is that of w, so the weight gradients land on w unchanged.
  const int D = cfg_.head_dim;
  float* q = qk_weights_.data();
  float* k = q + D;
  for (int i = 0; i < D; ++i) q[i] = 1.0f + w.q_norm_w[i], k[i] = 1.0f + w.k_norm_w[i];
  return {q, k, a.qk_saved.data(), a.qk_rstd.data()};
}

const float* TrainBlock::post_norm_backward(const float* weight, float* dweight, const AlignedBuffer<float>& proj,
                                            const AlignedBuffer<float>& rstd, const float* dresid) {
  if (!post_norms_) return dresid;
  DL_PROFILE("bwd.norm");
  s_.dpost.zero();
  par_.norm_backward(weight, dweight, nullptr, dresid, proj.data(), nullptr, rstd.data(), s_.dpost.data());
  return s_.dpost.data();
}

void TrainBlock::forward(int layer, const LayerTensors& w, const float* in, BlockActs& a, float* out) {
  const int C = cfg_.n_embd, I = cfg_.mlp_act_dim();
  const int64_t rows = par_.rows();
  // Attention branch: mid = in + attn_out(attention(qkv(norm1(in))))
  {
    DL_PROFILE("fwd.norm");
    par_.norm_forward(w.attn_norm_w, w.attn_norm_b, in, a.norm1.data(), a.norm1_mean.data(), a.norm1_rstd.data());
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.qkv.data(), a.norm1.data(), w.qkv_w, w.qkv_b, BT_, C, cfg_.qkv_dim(), mode_);
  }
  attention_.forward(layer, a.qkv.data(), a.attn.data(), a.lse.data(), qk_norm(w, a));
  {
    DL_PROFILE("fwd.matmul");
    float* proj = post_norms_ ? a.attn_proj.data() : a.mid.data();
    par_.row_parallel_forward(proj, a.attn.data(), w.attn_out_w, w.attn_out_b, cfg_.attn_dim(), mode_);
  }
  if (post_norms_) {
    DL_PROFILE("fwd.norm");
    par_.local_norm_forward(w.attn_post_norm_w, a.attn_proj.data(), a.mid.data(), a.attn_post_rstd.data());
  }
  {
    DL_PROFILE("fwd.residual");
    add_inplace(a.mid.data(), in, rows * C);
  }
  // MLP branch: out = mid + mlp_out(act(mlp_in(norm2(mid))))
  {
    DL_PROFILE("fwd.norm");
    par_.norm_forward(w.mlp_norm_w, w.mlp_norm_b, a.mid.data(), a.norm2.data(), a.norm2_mean.data(),
                      a.norm2_rstd.data());
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.mlp_in.data(), a.norm2.data(), w.mlp_in_w, w.mlp_in_b, BT_, C, cfg_.mlp_in_dim(), mode_);
  }
  {
    DL_PROFILE("fwd.activation");
    mlp_activation_forward(mlp_, a.mlp_act.data(), a.mlp_in.data(), BT_, I);
  }
  {
    DL_PROFILE("fwd.matmul");
    par_.row_parallel_forward(post_norms_ ? a.mlp_proj.data() : out, a.mlp_act.data(), w.mlp_out_w, w.mlp_out_b, I,
                              mode_);
  }
  if (post_norms_) {
    DL_PROFILE("fwd.norm");
    par_.local_norm_forward(w.mlp_post_norm_w, a.mlp_proj.data(), out, a.mlp_post_rstd.data());
  }
  {
    DL_PROFILE("fwd.residual");
    add_inplace(out, a.mid.data(), rows * C);
  }
}

void TrainBlock::backward(int layer, const LayerTensors& w, const LayerTensors& g, const float* in, BlockActs& a,
                          float* dresid) {
  const int C = cfg_.n_embd, I = cfg_.mlp_act_dim();

  // MLP branch: out = mid + post2(mlp_out(act(mlp_in(norm2(mid)))))
  const float* dout =
      par_.all_rows(post_norm_backward(w.mlp_post_norm_w, g.mlp_post_norm_w, a.mlp_proj, a.mlp_post_rstd, dresid));
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(s_.dmlp_act.data(), dout, w.mlp_out_w, BT_, I, C, mode_);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.mlp_out_w, g.mlp_out_b, dout, a.mlp_act.data(), BT_, I, C, mode_);
  }
  {
    DL_PROFILE("bwd.activation");
    mlp_activation_backward(mlp_, s_.dmlp_in.data(), a.mlp_in.data(), s_.dmlp_act.data(), BT_, I);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(s_.dnorm.data(), s_.dmlp_in.data(), w.mlp_in_w, BT_, C, cfg_.mlp_in_dim(), mode_);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.mlp_in_w, g.mlp_in_b, s_.dmlp_in.data(), a.norm2.data(), BT_, C, cfg_.mlp_in_dim(),
                           mode_);
  }
  {
    const float* dnorm = par_.reduce_input_grad(s_.dnorm.data());
    DL_PROFILE("bwd.norm");
    par_.norm_backward(w.mlp_norm_w, g.mlp_norm_w, g.mlp_norm_b, dnorm, a.mid.data(), a.norm2_mean.data(),
                       a.norm2_rstd.data(), dresid);
  }

  // Attention branch: mid = in + post1(attn_out(attention(qkv(norm1(in)))))
  dout = par_.all_rows(
      post_norm_backward(w.attn_post_norm_w, g.attn_post_norm_w, a.attn_proj, a.attn_post_rstd, dresid));
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(s_.dattn.data(), dout, w.attn_out_w, BT_, cfg_.attn_dim(), C, mode_);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.attn_out_w, g.attn_out_b, dout, a.attn.data(), BT_, cfg_.attn_dim(), C, mode_);
  }
  attention_.backward(layer, a.qkv.data(), a.attn.data(), a.lse.data(), s_.dattn.data(), s_.dqkv.data(), qk_norm(w, a),
                      g.q_norm_w, g.k_norm_w);
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.qkv_w, g.qkv_b, s_.dqkv.data(), a.norm1.data(), BT_, C, cfg_.qkv_dim(), mode_);
  }
  attention_.drop_replicated_kv_input_grad(s_.dqkv.data());
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(s_.dnorm.data(), s_.dqkv.data(), w.qkv_w, BT_, C, cfg_.qkv_dim(), mode_);
  }
  {
    const float* dnorm = par_.reduce_input_grad(s_.dnorm.data());
    DL_PROFILE("bwd.norm");
    par_.norm_backward(w.attn_norm_w, g.attn_norm_w, g.attn_norm_b, dnorm, in, a.norm1_mean.data(),
                       a.norm1_rstd.data(), dresid);
  }
}

}  // namespace distllm
