#include "distllm/model/train_attention.h"

#include <cmath>
#include <cstring>

#include "distllm/base/profiler.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/vec.h"
#include "distllm/model/rope_scaling.h"

namespace distllm {

using namespace kernels;

TrainAttention::TrainAttention(const ModelConfig& shard, int B, int T, int seq_len, const TensorParallel& tp,
                               const ContextParallel& cp, const int32_t* positions)
    : cfg_(shard), B_(B), T_(T), BT_(static_cast<int64_t>(B) * T), tp_(tp), positions_(positions) {
  rotary_ = cfg_.block().rotary();
  if (rotary_) rope_ = rope_table(cfg_, seq_len);
  if (rotary_ && cfg_.rope_local_theta > 0.0) local_rope_ = rope_table(cfg_, seq_len, /*local=*/true);
  if (cp.active()) ring_ = std::make_unique<RingAttention>(cfg_, B_, seq_len, *cp.comm);
  if (tp_.active() && tp_.plan->kv_replicas() > 1)
    kv_sum_.resize(static_cast<size_t>(BT_ * 2 * tp_.plan->full().n_kv_head * cfg_.head_dim));
  if (tp_.active() && cfg_.block().qk_norm) norm_grads_.resize(static_cast<size_t>(2 * cfg_.head_dim));
}

int64_t TrainAttention::qk_saved_floats() const {
  return cfg_.block().qk_norm ? BT_ * (cfg_.n_head + cfg_.n_kv_head) * cfg_.head_dim : 0;
}

int64_t TrainAttention::qk_rstd_floats() const {
  return cfg_.block().qk_norm ? BT_ * (cfg_.n_head + cfg_.n_kv_head) : 0;
}

size_t TrainAttention::buffer_bytes() const {
  return (kv_sum_.size() + norm_grads_.size()) * sizeof(float) + (ring_ ? ring_->buffer_bytes() : 0);
}

const RopeTable& TrainAttention::rope_of(int layer) const {
  return cfg_.layer_attention(layer).local_rope ? local_rope_ : rope_;
}

AttentionArgs TrainAttention::args(int layer, const float* qkv, float* out, float* lse) const {
  const ModelConfig::LayerAttention variant = cfg_.layer_attention(layer);
  AttentionArgs a;
  a.batch = B_;
  a.n_head = cfg_.n_head;
  a.n_kv_head = cfg_.n_kv_head;
  a.head_dim = cfg_.head_dim;
  a.q_len = a.kv_len = T_;
  a.scale = variant.scale;
  a.window = variant.window;
  a.softcap = variant.softcap;
  const int64_t row = cfg_.qkv_dim();
  a.q = qkv;
  a.k = qkv + cfg_.attn_dim();
  a.v = qkv + cfg_.attn_dim() + static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  a.q_row_stride = a.kv_row_stride = row;
  a.q_batch_stride = a.kv_batch_stride = row * T_;
  a.out = out;
  a.out_row_stride = cfg_.attn_dim();
  a.out_batch_stride = static_cast<int64_t>(cfg_.attn_dim()) * T_;
  a.lse = lse;
  return a;
}

void TrainAttention::forward(int layer, float* qkv, float* out, float* lse, const QkNorm& norm) {
  if (norm.q_weight) {
    DL_PROFILE("fwd.qk_norm");
    const int64_t D = cfg_.head_dim, H = cfg_.n_head;
    head_rmsnorm_forward(qkv, BT_, cfg_.qkv_dim(), cfg_.n_head, cfg_.head_dim, norm.q_weight, cfg_.norm_eps,
                         norm.saved, norm.rstd);
    head_rmsnorm_forward(qkv + cfg_.attn_dim(), BT_, cfg_.qkv_dim(), cfg_.n_kv_head, cfg_.head_dim, norm.k_weight,
                         cfg_.norm_eps, norm.saved + BT_ * H * D, norm.rstd + BT_ * H);
  }
  if (rotary_) {
    DL_PROFILE("fwd.rope");
    rope_apply(qkv, BT_, cfg_.qkv_dim(), cfg_.n_head, positions_, rope_of(layer), false);
    rope_apply(qkv + cfg_.attn_dim(), BT_, cfg_.qkv_dim(), cfg_.n_kv_head, positions_, rope_of(layer), false);
  }
  DL_PROFILE("fwd.attention");
  if (ring_)
    ring_->forward(layer, qkv, out, lse);
  else
    attention_forward(args(layer, qkv, out, lse));
}

void TrainAttention::backward(int layer, const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv,
                              const QkNorm& norm, float* dq_norm, float* dk_norm) {
  const int64_t kv_off = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  float* dq = dqkv;
  float* dk = dq + cfg_.attn_dim();
  float* dv = dk + kv_off;
  {
    DL_PROFILE("bwd.attention");
    if (ring_) {
      ring_->backward(layer, qkv, out, lse, dout, dqkv);
    } else {
      // The kernel reads q/k/v and out through the args; it writes only the grads.
      AttentionArgs a = args(layer, qkv, const_cast<float*>(out), const_cast<float*>(lse));
      attention_backward(a, AttentionGrads{dq, dk, dv, dout});
    }
  }
  if (rotary_) {
    DL_PROFILE("bwd.rope");
    rope_apply(dq, BT_, cfg_.qkv_dim(), cfg_.n_head, positions_, rope_of(layer), true);
    rope_apply(dk, BT_, cfg_.qkv_dim(), cfg_.n_kv_head, positions_, rope_of(layer), true);
  }
  if (kv_sum_.size() != 0) sum_replicated_kv_grads(dk, dv);
  if (norm.q_weight) qk_norm_backward(dqkv, norm, dq_norm, dk_norm);
}

void TrainAttention::qk_norm_backward(float* dqkv, const QkNorm& norm, float* dq_norm, float* dk_norm) {
  DL_PROFILE("bwd.qk_norm");
  const int64_t D = cfg_.head_dim, H = cfg_.n_head;
  // Under tensor parallelism each rank's heads give part of the norms' weight
  // gradients: summed over the group (a replicated key/value head counted once).
  const bool tp = norm_grads_.size() != 0;
  const bool owns_k = !tp || tp_.plan->rank() % tp_.plan->kv_replicas() == 0;
  if (tp) norm_grads_.zero();
  float* gq = tp ? norm_grads_.data() : dq_norm;
  float* gk = tp ? norm_grads_.data() + D : dk_norm;
  head_rmsnorm_backward(dqkv, BT_, cfg_.qkv_dim(), cfg_.n_head, cfg_.head_dim, norm.q_weight, norm.saved, norm.rstd,
                        gq);
  head_rmsnorm_backward(dqkv + cfg_.attn_dim(), BT_, cfg_.qkv_dim(), cfg_.n_kv_head, cfg_.head_dim, norm.k_weight,
                        norm.saved + BT_ * H * D, norm.rstd + BT_ * H, owns_k ? gk : nullptr);
  if (!tp) return;
  tp_.comm->allreduce_sum(norm_grads_.data(), 2 * D);
  add_inplace(dq_norm, gq, D);
  add_inplace(dk_norm, gk, D);
}

void TrainAttention::drop_replicated_kv_input_grad(float* dqkv) const {
  if (kv_sum_.size() == 0 || tp_.plan->rank() % tp_.plan->kv_replicas() == 0) return;
  const int64_t kv_off = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  float* dk = dqkv + cfg_.attn_dim();
  for (int64_t r = 0; r < BT_; ++r) std::memset(dk + r * cfg_.qkv_dim(), 0, sizeof(float) * 2 * kv_off);
}

void TrainAttention::sum_replicated_kv_grads(float* dk, float* dv) {
  // Ranks sharing a key/value head each hold part of its gradient (from their own
  // query heads). One all-reduce over the tp group sums every head's parts: each
  // rank writes its head's d(k) and d(v) into that head's columns, zeros elsewhere.
  DL_PROFILE("tp.kv_sum");
  const int64_t D = cfg_.head_dim, heads = tp_.plan->full().n_kv_head, row = 2 * heads * D;
  const int64_t at = tp_.plan->kv_head_begin() * D;
  kv_sum_.zero();
  for (int64_t r = 0; r < BT_; ++r) {
    std::memcpy(kv_sum_.data() + r * row + at, dk + r * cfg_.qkv_dim(), sizeof(float) * D);
    std::memcpy(kv_sum_.data() + r * row + heads * D + at, dv + r * cfg_.qkv_dim(), sizeof(float) * D);
  }
  tp_.comm->allreduce_sum(kv_sum_.data(), BT_ * row);
  for (int64_t r = 0; r < BT_; ++r) {
    std::memcpy(dk + r * cfg_.qkv_dim(), kv_sum_.data() + r * row + at, sizeof(float) * D);
    std::memcpy(dv + r * cfg_.qkv_dim(), kv_sum_.data() + r * row + heads * D + at, sizeof(float) * D);
  }
}

}  // namespace distllm
