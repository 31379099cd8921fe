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

ContextLayout::ContextLayout(int cp_size, int cp_rank, int length) : cp(cp_size), rank(cp_rank), seq_len(length) {
  DL_CHECK(cp >= 1 && rank >= 0 && rank < cp, "context-parallel rank %d of %d is out of range", rank, cp);
  DL_CHECK(seq_len > 0 && seq_len % (2 * cp) == 0,
           "context parallelism cuts each sequence into 2 x cp = %d equal chunks: the sequence length %d must be a "
           "multiple of %d",
           2 * cp, seq_len, 2 * cp);
}

RingAttention::RingAttention(const ModelConfig& config, int batch, int seq_len, ContextParallelComm& comm)
    : cfg_(config), B_(batch), layout_(comm.size(), comm.rank(), seq_len), comm_(comm) {
  C_ = layout_.chunk();
  T_ = layout_.local_len();
  kv_width_ = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  const int64_t rows = static_cast<int64_t>(B_) * T_;
  const int64_t per_head = static_cast<int64_t>(B_) * cfg_.n_head;
  for (int i = 0; i < 2; ++i) {
    kv_[i].resize(static_cast<size_t>(rows * 2 * kv_width_));
    grad_[i].resize(kv_[i].size());
  }
  block_out_.resize(static_cast<size_t>(int64_t(B_) * C_ * cfg_.attn_dim()));
  block_lse_.resize(static_cast<size_t>(per_head * C_));
  chunk_lse_.resize(static_cast<size_t>(2 * per_head * C_));
  chunk_delta_.resize(chunk_lse_.size());
}

size_t RingAttention::buffer_bytes() const {
  return (2 * kv_[0].size() + 2 * grad_[0].size() + block_out_.size() + block_lse_.size() + chunk_lse_.size() +
          chunk_delta_.size()) *
         sizeof(float);
}

void RingAttention::pack_kv(const float* qkv) {
  // k and v sit next to each other in a qkv row: [q | k | v].
  const int64_t rows = static_cast<int64_t>(B_) * T_, qkv_dim = cfg_.qkv_dim(), at = cfg_.attn_dim();
  parallel_for(0, rows, [&](int64_t r) {
    std::memcpy(kv_[0].data() + r * 2 * kv_width_, qkv + r * qkv_dim + at, sizeof(float) * 2 * kv_width_);
  });
}

void RingAttention::start_kv_shift() {
  comm_.start_ring_shift(kv_[0].data(), kv_[1].data(), static_cast<int64_t>(kv_[0].size()));
}

void RingAttention::finish_kv_shift() {
  DL_PROFILE("cp.ring_wait");
  comm_.finish_ring_shift();
  std::swap(kv_[0], kv_[1]);
}

void RingAttention::shift_grads() {
  DL_PROFILE("cp.ring_shift_grads");
  comm_.ring_shift(grad_[0].data(), grad_[1].data(), static_cast<int64_t>(grad_[0].size()));
  std::swap(grad_[0], grad_[1]);
}

template <typename Fn>
void RingAttention::for_each_visible_pair(int owner, int window, Fn&& fn) const {
  const ContextLayout held(layout_.cp, owner, layout_.seq_len);
  for (int qi = 0; qi < 2; ++qi)
    for (int ki = 0; ki < 2; ++ki) {
      const int q = layout_.chunk_index(qi), k = held.chunk_index(ki);
      const int64_t offset = int64_t(q - k) * C_;  // 0: the same chunk, causal
      // A sliding window may lie wholly after a key chunk: the nearest query is
      // offset - (C - 1) positions after its last key.
      const bool in_window = window <= 0 || offset - (C_ - 1) < window;
      if (k <= q && in_window) fn(qi, ki, offset);
    }
}

namespace {

// Attention of query chunk qi of this rank's rows (qkv) to key chunk ki of a
// travelling block (rows of `width` floats), the queries `offset` positions after
// the keys' start. Every tensor holds 2 chunks per sequence (T = 2C rows).
kernels::AttentionArgs chunk_args(const ModelConfig& c, int layer, int B, int C, const float* qkv, int qi,
                                  const float* kv, int ki, int64_t width, int64_t offset) {
  const ModelConfig::LayerAttention variant = c.layer_attention(layer);
  const int64_t T = 2 * static_cast<int64_t>(C);
  kernels::AttentionArgs a;
  a.batch = B;
  a.n_head = c.n_head;
  a.n_kv_head = c.n_kv_head;
  a.head_dim = c.head_dim;
  a.q_len = a.kv_len = C;
  a.query_offset = static_cast<int>(offset);
  a.scale = variant.scale;
  a.window = variant.window;
  a.softcap = variant.softcap;
  a.q = qkv + qi * C * static_cast<int64_t>(c.qkv_dim());
  a.q_row_stride = c.qkv_dim();
  a.q_batch_stride = static_cast<int64_t>(c.qkv_dim()) * T;
  a.k = kv + ki * C * width;
  a.v = a.k + static_cast<int64_t>(c.n_kv_head) * c.head_dim;
  a.kv_row_stride = width;
  a.kv_batch_stride = width * T;
  return a;
}

}  // namespace

void RingAttention::combine(int qi, bool first, float* out, float* lse) {
  // Online softmax: out and lse of query chunk qi become those of the union of the
  // key chunks so far.
  DL_PROFILE("cp.combine");
  const int H = cfg_.n_head, D = cfg_.head_dim, A = cfg_.attn_dim();
  parallel_for(0, static_cast<int64_t>(B_) * H * C_, [&](int64_t i) {
    const int64_t b = i / (int64_t(H) * C_), h = (i / C_) % H, t = i % C_;
    const int64_t li = (b * H + h) * T_ + qi * C_ + t;
    float* o = out + (b * T_ + qi * C_ + t) * A + h * D;
    const float* ob = block_out_.data() + (b * C_ + t) * A + h * D;
    const float lb = block_lse_[static_cast<size_t>(i)];
    // A row that sees no key of this block (outside its window) keeps what it has.
    if (!first && lb == -INFINITY) return;
    if (first || lse[li] == -INFINITY) {
      std::memcpy(o, ob, sizeof(float) * D);
      lse[li] = lb;
      return;
    }
    const float la = lse[li];
    const float m = std::max(la, lb);
    const float l = m + std::log(std::exp(la - m) + std::exp(lb - m));
    const float wa = std::exp(la - l), wb = std::exp(lb - l);
    for (int d = 0; d < D; ++d) o[d] = wa * o[d] + wb * ob[d];
    lse[li] = l;
  });
}

void RingAttention::forward(int layer, const float* qkv, float* out, float* lse) {
  const int window = cfg_.layer_attention(layer).window;
  const int n = comm_.size();
  const int64_t width = 2 * kv_width_;
  pack_kv(qkv);
  bool seen[2] = {false, false};
  for (int s = 0; s < n; ++s) {
    if (s + 1 < n) start_kv_shift();  // travels while this block is attended to
    for_each_visible_pair(block_at(s), window, [&](int qi, int ki, int64_t offset) {
      kernels::AttentionArgs a = chunk_args(cfg_, layer, B_, C_, qkv, qi, kv_[0].data(), ki, width, offset);
      a.out = block_out_.data();
      a.out_row_stride = cfg_.attn_dim();
      a.out_batch_stride = static_cast<int64_t>(cfg_.attn_dim()) * C_;
      a.lse = block_lse_.data();
      {
        DL_PROFILE("fwd.attention");
        kernels::attention_forward(a);
      }
      combine(qi, !seen[qi], out, lse);
      seen[qi] = true;
    });
    if (s + 1 < n) finish_kv_shift();
  }
}

void RingAttention::backward(int layer, const float* qkv, const float* out, const float* lse, const float* dout,
                             float* dqkv) {
  const int window = cfg_.layer_attention(layer).window;
  const int n = comm_.size(), H = cfg_.n_head, D = cfg_.head_dim, A = cfg_.attn_dim();
  const int64_t width = 2 * kv_width_, rows = static_cast<int64_t>(B_) * T_, qkv_dim = cfg_.qkv_dim();
  const int64_t per_chunk = static_cast<int64_t>(B_) * H * C_;
  // Per query chunk, the whole attention's lse and delta = rowsum(dO * O), laid out
  // [B, H, C] as the kernel reads them.
  parallel_for(0, 2 * per_chunk, [&](int64_t i) {
    const int64_t qi = i / per_chunk, j = i % per_chunk;
    const int64_t b = j / (int64_t(H) * C_), h = (j / C_) % H, t = j % C_;
    const int64_t row = b * T_ + qi * C_ + t;
    chunk_lse_[static_cast<size_t>(i)] = lse[(b * H + h) * T_ + qi * C_ + t];
    chunk_delta_[static_cast<size_t>(i)] = kernels::dot(dout + row * A + h * D, out + row * A + h * D, D);
  });
  parallel_for(0, rows, [&](int64_t r) { std::memset(dqkv + r * qkv_dim, 0, sizeof(float) * A); });
  pack_kv(qkv);
  std::memset(grad_[0].data(), 0, grad_[0].size() * sizeof(float));  // the gradients start at zero
  for (int s = 0; s < n; ++s) {
    if (s > 0) shift_grads();  // the held block's gradients, with every earlier rank's part
    if (s + 1 < n) start_kv_shift();
    for_each_visible_pair(block_at(s), window, [&](int qi, int ki, int64_t offset) {
      kernels::AttentionArgs a = chunk_args(cfg_, layer, B_, C_, qkv, qi, kv_[0].data(), ki, width, offset);
      // dout (and the unused out) keep the rows of both chunks.
      a.out = const_cast<float*>(out) + qi * C_ * static_cast<int64_t>(A);
      a.out_row_stride = A;
      a.out_batch_stride = static_cast<int64_t>(A) * T_;
      a.lse = chunk_lse_.data() + qi * per_chunk;
      kernels::AttentionGrads g;
      g.dq = dqkv + qi * C_ * qkv_dim;
      g.dk = grad_[0].data() + ki * C_ * width;  // the same row layout as the keys and values
      g.dv = g.dk + kv_width_;
      g.dout = dout + qi * C_ * static_cast<int64_t>(A);
      g.delta = chunk_delta_.data() + qi * per_chunk;
      g.accumulate = true;
      DL_PROFILE("bwd.attention");
      kernels::attention_backward(a, g);
    });
    if (s + 1 < n) finish_kv_shift();
  }
  // After n - 1 shifts this rank holds the next rank's block; one more brings its
  // own block's gradients home with every rank's contribution.
  if (n > 1) shift_grads();
  parallel_for(0, rows, [&](int64_t r) {
    std::memcpy(dqkv + r * qkv_dim + A, grad_[0].data() + r * width, sizeof(float) * 2 * kv_width_);
  });
}

}  // namespace distllm
