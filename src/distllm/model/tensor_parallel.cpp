#include "distllm/model/tensor_parallel.h"

#include <cmath>
#include <cstring>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/strings.h"
#include "distllm/kernels/cross_entropy.h"

namespace distllm {

namespace {

ModelConfig validated(ModelConfig c) {
  c.validate();
  return c;
}

}  // namespace

std::pair<int64_t, int64_t> TensorParallelPlan::split(int64_t n, int parts, int index) {
  return {n * index / parts, n * (index + 1) / parts};
}

TensorParallelPlan::TensorParallelPlan(const ModelConfig& full, int size, int rank)
    : full_(validated(full)), local_(full), size_(size), rank_(rank), full_layout_(full), local_layout_(full) {
  DL_CHECK(size >= 1 && rank >= 0 && rank < size, "tensor-parallel rank %d of %d is out of range", rank, size);
  const int H = full.n_head, KV = full.n_kv_head;
  DL_CHECK(H % size == 0,
           "the tensor-parallel size %d does not divide the model's %d attention heads (n_head); pick a tp "
           "size that divides %d",
           size, H, H);
  DL_CHECK(KV % size == 0 || size % KV == 0,
           "the tensor-parallel size %d neither divides the model's %d key/value heads (n_kv_head) nor is a "
           "multiple of them, so they can be neither split nor replicated evenly",
           size, KV);
  DL_CHECK(full.intermediate_size >= size, "intermediate_size %d is smaller than the tensor-parallel size %d",
           full.intermediate_size, size);
  DL_CHECK(full.vocab_size >= size, "vocab_size %d is smaller than the tensor-parallel size %d", full.vocab_size,
           size);
  local_.n_head = H / size;
  head_begin_ = rank * local_.n_head;
  if (KV % size == 0) {
    local_.n_kv_head = KV / size;
    kv_head_begin_ = rank * local_.n_kv_head;
  } else {
    kv_replicas_ = size / KV;
    local_.n_kv_head = 1;
    kv_head_begin_ = rank / kv_replicas_;
  }
  auto mlp = split(full.intermediate_size, size, rank);
  mlp_begin_ = mlp.first;
  local_.intermediate_size = static_cast<int>(mlp.second - mlp.first);
  auto vocab = split(full.vocab_size, size, rank);
  vocab_begin_ = static_cast<int>(vocab.first);
  local_.vocab_size = static_cast<int>(vocab.second - vocab.first);
  local_layout_ = ParamLayout(local_);
  DL_CHECK(local_layout_.tensors().size() == full_layout_.tensors().size(), "tensor-parallel layout mismatch");
  for (const ParamTensor& t : local_layout_.tensors()) {
    // Replicated key/value heads inside a fused q|k|v matrix would need their part
    // of its gradient summed over the replicas (grad_needs_kv_sum works per tensor).
    DL_CHECK(kv_replicas_ == 1 || t.split != TpSplit::kQkvFused,
             "the tensor-parallel size %d is larger than the model's %d key/value heads, which %s holds fused "
             "with q; pick a tp size of at most %d",
             size, KV, t.name.c_str(), KV);
    slices_.push_back(slice_for(t));
  }
}

TensorSlice TensorParallelPlan::slice_for(const ParamTensor& t) const {
  const int64_t D = full_.head_dim;
  const int64_t q0 = head_begin_ * D, q1 = (head_begin_ + local_.n_head) * D;
  const int64_t kv0 = kv_head_begin_ * D, kv1 = (kv_head_begin_ + local_.n_kv_head) * D;
  const int64_t m0 = mlp_begin_, m1 = mlp_begin_ + local_.intermediate_size;
  const int64_t v0 = vocab_begin_, v1 = vocab_begin_ + local_.vocab_size;
  const int axis = t.split_axis;
  auto one = [axis](int64_t b, int64_t e) { return TensorSlice{axis, {{b, e}}}; };
  switch (t.split) {
    case TpSplit::kReplicated: return TensorSlice{};  // norms, row-parallel biases, learned positions
    case TpSplit::kQueryHeads: return one(q0, q1);
    case TpSplit::kKvHeads: return one(kv0, kv1);
    case TpSplit::kMlpHidden: return one(m0, m1);
    case TpSplit::kGateUpFused: {
      // A fused [gate | up] axis: this rank's hidden units of each half.
      const int64_t I = full_.intermediate_size;
      return TensorSlice{axis, {{m0, m1}, {I + m0, I + m1}}};
    }
    case TpSplit::kVocab: return one(v0, v1);
    case TpSplit::kQkvFused: {
      // A fused [q | k | v] axis: this rank's heads of each.
      const int64_t A = full_.attn_dim(), KVD = static_cast<int64_t>(full_.n_kv_head) * D;
      return TensorSlice{axis, {{q0, q1}, {A + kv0, A + kv1}, {A + KVD + kv0, A + KVD + kv1}}};
    }
  }
  return TensorSlice{};
}

bool TensorParallelPlan::grad_needs_kv_sum(int tensor) const {
  if (kv_replicas_ == 1) return false;
  return local_layout_.tensors().at(static_cast<size_t>(tensor)).split == TpSplit::kKvHeads;
}

float TensorParallelPlan::norm_weight(int tensor) const {
  if (slice(tensor).replicated()) return 1.0f / static_cast<float>(size_);
  if (grad_needs_kv_sum(tensor)) return 1.0f / static_cast<float>(kv_replicas_);
  return 1.0f;
}

void TensorParallelPlan::copy_tensor(int tensor, const float* from, float* to, bool to_local) const {
  const ParamTensor& ft = full_layout_.tensors()[static_cast<size_t>(tensor)];
  const ParamTensor& lt = local_layout_.tensors()[static_cast<size_t>(tensor)];
  // Moves n floats between element fi of the whole tensor and element li of the shard.
  auto move = [&](int64_t fi, int64_t li, int64_t n) {
    const size_t bytes = sizeof(float) * static_cast<size_t>(n);
    if (to_local)
      std::memcpy(to + lt.offset + li, from + ft.offset + fi, bytes);
    else
      std::memcpy(to + ft.offset + fi, from + lt.offset + li, bytes);
  };
  const TensorSlice& s = slice(tensor);
  if (s.replicated()) {
    move(0, 0, ft.numel);
    return;
  }
  // A 1-D tensor is one row; a split along axis 0 of a matrix moves whole rows.
  const bool matrix = ft.shape.size() == 2;
  const int64_t rows = matrix ? ft.shape[0] : 1;
  const int64_t full_cols = matrix ? ft.shape[1] : ft.shape[0];
  const int64_t local_cols = matrix ? lt.shape[1] : lt.shape[0];
  int64_t local_at = 0;  // in rows (axis 0 of a matrix) or columns (otherwise)
  for (auto [b, e] : s.ranges) {
    if (matrix && s.axis == 0) {
      move(b * full_cols, local_at * full_cols, (e - b) * full_cols);
    } else {
      for (int64_t r = 0; r < rows; ++r) move(r * full_cols + b, r * local_cols + local_at, e - b);
    }
    local_at += e - b;
  }
}

void TensorParallelPlan::full_to_local(const float* full, float* local) const {
  std::memset(local, 0, sizeof(float) * static_cast<size_t>(local_layout_.total_size()));
  for (size_t k = 0; k < slices_.size(); ++k) copy_tensor(static_cast<int>(k), full, local, true);
}

void TensorParallelPlan::local_to_full(const float* local, float* full) const {
  for (size_t k = 0; k < slices_.size(); ++k) copy_tensor(static_cast<int>(k), local, full, false);
}

void gather_tensor_parallel(TensorParallelComm& comm, const TensorParallelPlan& plan, const float* local,
                            float* full) {
  const int n = comm.size();
  DL_CHECK(n == plan.size() && comm.rank() == plan.rank(), "the tp group does not match the tensor-parallel plan");
  // Shards differ in size when the MLP width or the vocabulary splits unevenly.
  std::vector<TensorParallelPlan> plans;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    plans.emplace_back(plan.full(), n, r);
    counts.push_back(plans.back().local_layout().total_size());
    total += counts.back();
  }
  AlignedBuffer<float> all(static_cast<size_t>(total));
  comm.allgatherv(local, all.data(), counts.data());
  int64_t at = 0;
  for (int r = 0; r < n; ++r) {
    plans[static_cast<size_t>(r)].local_to_full(all.data() + at, full);
    at += counts[static_cast<size_t>(r)];
  }
}

void vocab_parallel_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int Vl,
                                  int vocab_begin, float grad_scale, bool compute_grad, TensorParallelComm& comm) {
  std::vector<float> lse(static_cast<size_t>(N)), top(static_cast<size_t>(N)), sums(static_cast<size_t>(2 * N));
  kernels::logsumexp_rows(lse.data(), logits, N, Vl);
  top = lse;
  comm.allreduce_max(top.data(), N);
  // Each rank's exp-sum relative to the row's global maximum of part log-sum-exps,
  // and the target's logit from the rank whose columns hold it (0 elsewhere).
  auto owned = [&](int32_t t) { return t >= vocab_begin && t < vocab_begin + Vl; };
  for (int64_t n = 0; n < N; ++n) {
    sums[n] = std::exp(lse[n] - top[n]);
    const int32_t t = targets[n];
    sums[N + n] = owned(t) ? logits[n * Vl + (t - vocab_begin)] : 0.0f;
  }
  comm.allreduce_sum(sums.data(), 2 * N);
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = top[n] + std::log(sums[n]);
    losses[n] = targets[n] == kernels::kIgnoreIndex ? 0.0f : lse[n] - sums[N + n];
  }
  if (!compute_grad) return;
  kernels::softmax_rows_from_lse(logits, lse.data(), targets, N, Vl, grad_scale);
  for (int64_t n = 0; n < N; ++n)
    if (owned(targets[n])) logits[n * Vl + (targets[n] - vocab_begin)] -= grad_scale;
}

}  // namespace distllm
