#include "distllm/model/ring_attention.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/kernels/attention.h"
#include "distllm/kernels/vec.h"

namespace distllm {

RingAttention::RingAttention(const ModelConfig& config, int batch, int block_len, ContextParallelComm& comm)
    : cfg_(config), B_(batch), T_(block_len), comm_(comm) {
  kv_width_ = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  const int64_t rows = static_cast<int64_t>(B_) * T_;
  cur_.resize(static_cast<size_t>(rows * 4 * kv_width_));
  next_.resize(cur_.size());
  block_out_.resize(static_cast<size_t>(rows * cfg_.attn_dim()));
  block_lse_.resize(static_cast<size_t>(B_) * cfg_.n_head * T_);
  delta_.resize(block_lse_.size());
}

size_t RingAttention::buffer_bytes() const {
  return (cur_.size() + next_.size() + block_out_.size() + block_lse_.size() + delta_.size()) * sizeof(float);
}

void RingAttention::pack_kv(const float* qkv, int64_t width) {
  // k and v sit next to each other in a qkv row: [q | k | v].
  const int64_t rows = static_cast<int64_t>(B_) * T_, qkv_dim = cfg_.qkv_dim(), at = cfg_.attn_dim();
  parallel_for(0, rows, [&](int64_t r) {
    float* dst = cur_.data() + r * width;
    std::memcpy(dst, qkv + r * qkv_dim + at, sizeof(float) * 2 * kv_width_);
    if (width > 2 * kv_width_) std::memset(dst + 2 * kv_width_, 0, sizeof(float) * (width - 2 * kv_width_));
  });
}

void RingAttention::shift(int64_t width) {
  DL_PROFILE("cp.ring_shift");
  comm_.ring_shift(cur_.data(), next_.data(), static_cast<int64_t>(B_) * T_ * width);
  std::swap(cur_, next_);
}

namespace {

// Attention of this rank's queries to the travelling block (row width `width`)
// that holds positions `offset` before them (0: its own block, causal).
kernels::AttentionArgs block_args(const ModelConfig& c, int B, int T, const float* qkv, const float* kv, int64_t width,
                                  int64_t offset) {
  kernels::AttentionArgs a;
  a.batch = B;
  a.n_head = c.n_head;
  a.n_kv_head = c.n_kv_head;
  a.head_dim = c.head_dim;
  a.q_len = a.kv_len = T;
  a.query_offset = static_cast<int>(offset);
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.q = qkv;
  a.q_row_stride = c.qkv_dim();
  a.q_batch_stride = static_cast<int64_t>(c.qkv_dim()) * T;
  a.k = kv;
  a.v = kv + static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  a.kv_row_stride = width;
  a.kv_batch_stride = width * T;
  a.out_row_stride = c.attn_dim();
  a.out_batch_stride = static_cast<int64_t>(c.attn_dim()) * T;
  return a;
}

}  // namespace

void RingAttention::forward(const float* qkv, float* out, float* lse) {
  const int n = comm_.size(), rank = comm_.rank(), H = cfg_.n_head, D = cfg_.head_dim;
  const int64_t width = 2 * kv_width_;
  pack_kv(qkv, width);
  for (int s = 0; s < n; ++s) {
    if (s > 0) shift(width);
    const int j = block_at(s);
    if (j > rank) continue;  // a later block: causally invisible
    kernels::AttentionArgs a = block_args(cfg_, B_, T_, qkv, cur_.data(), width, int64_t(rank - j) * T_);
    a.out = s == 0 ? out : block_out_.data();
    a.lse = s == 0 ? lse : block_lse_.data();
    {
      DL_PROFILE("fwd.attention");
      kernels::attention_forward(a);
    }
    if (s == 0) continue;
    // Online softmax: out and lse become those of the union of the blocks so far.
    DL_PROFILE("cp.combine");
    parallel_for(0, static_cast<int64_t>(B_) * H * T_, [&](int64_t i) {
      const int64_t b = i / (int64_t(H) * T_), h = (i / T_) % H, t = i % T_;
      const float la = lse[i], lb = block_lse_[i];
      const float m = std::max(la, lb);
      const float l = m + std::log(std::exp(la - m) + std::exp(lb - m));
      const float wa = std::exp(la - l), wb = std::exp(lb - l);
      float* o = out + (b * T_ + t) * cfg_.attn_dim() + h * D;
      const float* ob = block_out_.data() + (b * T_ + t) * cfg_.attn_dim() + h * D;
      for (int d = 0; d < D; ++d) o[d] = wa * o[d] + wb * ob[d];
      lse[i] = l;
    });
  }
}

void RingAttention::backward(const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv) {
  const int n = comm_.size(), rank = comm_.rank(), H = cfg_.n_head, D = cfg_.head_dim;
  const int64_t width = 4 * kv_width_, rows = static_cast<int64_t>(B_) * T_, qkv_dim = cfg_.qkv_dim();
  // delta = rowsum(dO * O) of the whole attention, per (sequence, head, query).
  parallel_for(0, static_cast<int64_t>(B_) * H * T_, [&](int64_t i) {
    const int64_t b = i / (int64_t(H) * T_), h = (i / T_) % H, t = i % T_;
    const int64_t at = (b * T_ + t) * cfg_.attn_dim() + h * D;
    delta_[i] = kernels::dot(dout + at, out + at, D);
  });
  parallel_for(0, rows, [&](int64_t r) { std::memset(dqkv + r * qkv_dim, 0, sizeof(float) * cfg_.attn_dim()); });
  pack_kv(qkv, width);  // [k | v | dk | dv], the gradients starting at zero
  for (int s = 0; s < n; ++s) {
    if (s > 0) shift(width);
    const int j = block_at(s);
    if (j > rank) continue;
    kernels::AttentionArgs a = block_args(cfg_, B_, T_, qkv, cur_.data(), width, int64_t(rank - j) * T_);
    a.out = const_cast<float*>(out);
    a.lse = const_cast<float*>(lse);
    kernels::AttentionGrads g;
    g.dq = dqkv;
    g.dk = cur_.data() + 2 * kv_width_;
    g.dv = cur_.data() + 3 * kv_width_;
    g.dout = dout;
    g.delta = delta_.data();
    g.accumulate = true;
    DL_PROFILE("bwd.attention");
    kernels::attention_backward(a, g);
  }
  // After n - 1 shifts this rank holds the next rank's block; one more brings its
  // own block home with every rank's contribution to its gradient.
  if (n > 1) shift(width);
  parallel_for(0, rows, [&](int64_t r) {
    std::memcpy(dqkv + r * qkv_dim + cfg_.attn_dim(), cur_.data() + r * width + 2 * kv_width_,
                sizeof(float) * 2 * kv_width_);
  });
}

}  // namespace distllm
