#include "distllm/model/parallel_layers.h"

#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/vec.h"
#include "distllm/model/block_ops.h"

namespace distllm {

using namespace kernels;

ParallelLayers::ParallelLayers(const ModelConfig& shard, const TensorParallel& tp, int64_t BT)
    : norm_(shard.block().norm), eps_(shard.norm_eps), C_(shard.n_embd), BT_(BT), tp_(tp) {
  sp_ = tp_.active() && tp_.sequence_parallel;
  rows_ = BT_;
  if (!sp_) return;
  const int n = tp_.plan->size();
  DL_CHECK(BT_ >= n, "sequence parallelism needs at least %d tokens per micro-batch (batch x seq), got %lld", n,
           (long long)BT_);
  for (int r = 0; r < n; ++r) {
    auto [b, e] = TensorParallelPlan::split(BT_, n, r);
    row_counts_.push_back((e - b) * C_);
    if (r == tp_.plan->rank()) row_begin_ = b, rows_ = e - b;
  }
  partial_.resize(static_cast<size_t>(BT_ * C_));
  dfull_.resize(static_cast<size_t>(BT_ * C_));
  dmine_.resize(static_cast<size_t>(rows_ * C_));
  norm_grad_.resize(static_cast<size_t>(2 * C_));
}

size_t ParallelLayers::scratch_bytes() const {
  return (partial_.size() + dfull_.size() + dmine_.size() + norm_grad_.size()) * sizeof(float);
}

void ParallelLayers::norm_forward(const float* weight, const float* bias, const float* in, float* out, float* mean,
                                  float* rstd) {
  float* mine = out + row_begin_ * C_;
  block_norm_forward(norm_, mine, mean, rstd, in, weight, bias, rows_, C_, eps_);
  if (sp_) {
    DL_PROFILE("tp.allgather");
    tp_.comm->allgatherv(mine, out, row_counts_.data());
  }
}

void ParallelLayers::local_norm_forward(const float* weight, const float* in, float* out, float* rstd) {
  block_norm_forward(norm_, out, nullptr, rstd, in, weight, nullptr, rows_, C_, eps_);
}

void ParallelLayers::norm_backward(const float* weight, float* dweight, float* dbias, const float* dout,
                                   const float* in, const float* mean, const float* rstd, float* dresid) {
  if (!sp_) {
    block_norm_backward(norm_, dresid, dweight, dbias, dout, in, weight, mean, rstd, rows_, C_);
    return;
  }
  // This rank's rows give part of the parameters' gradient: computed apart
  // (gradients accumulate over micro-steps) and summed over the group.
  norm_grad_.zero();
  float* dw = norm_grad_.data();
  float* db = dbias ? dw + C_ : nullptr;
  block_norm_backward(norm_, dresid, dw, db, dout, in, weight, mean, rstd, rows_, C_);
  tp_.comm->allreduce_sum(norm_grad_.data(), db ? 2 * C_ : C_);
  add_inplace(dweight, dw, C_);
  if (dbias) add_inplace(dbias, db, C_);
}

const float* ParallelLayers::all_rows(const float* mine) {
  if (!sp_) return mine;
  DL_PROFILE("tp.allgather");
  std::memcpy(dfull_.data() + row_begin_ * C_, mine, sizeof(float) * rows_ * C_);
  tp_.comm->allgatherv(dfull_.data() + row_begin_ * C_, dfull_.data(), row_counts_.data());
  return dfull_.data();
}

const float* ParallelLayers::reduce_input_grad(float* partial) {
  if (!sp_) {
    allreduce(partial, BT_ * C_);
    return partial;
  }
  DL_PROFILE("tp.reduce_scatter");
  tp_.comm->reduce_scatter_v(partial, dmine_.data(), row_counts_.data());
  return dmine_.data();
}

void ParallelLayers::row_parallel_forward(float* out, const float* in, const float* w, const float* b, int in_dim,
                                          MatmulMode mode) {
  if (!tp_.active()) {
    matmul_forward(out, in, w, b, BT_, in_dim, C_, mode);
    return;
  }
  if (sp_) {
    // out holds this rank's rows: the sum of every rank's partial product of them.
    matmul_forward(partial_.data(), in, w, nullptr, BT_, in_dim, C_, mode);
    DL_PROFILE("tp.reduce_scatter");
    tp_.comm->reduce_scatter_v(partial_.data(), out, row_counts_.data());
  } else {
    matmul_forward(out, in, w, nullptr, BT_, in_dim, C_, mode);
    allreduce(out, BT_ * C_);
  }
  if (b) parallel_for(0, rows_, [&](int64_t r) { add_inplace(out + r * C_, b, C_); });
}

void ParallelLayers::embed_forward(const EmbedTensors& emb, const int32_t* tokens, const int32_t* positions,
                                   float* out) {
  if (!tp_.active()) {
    embedding_forward(out, tokens, positions, emb.wte, emb.wpe, BT_, C_);
    return;
  }
  // Each token's row comes from the one rank holding it; positions are replicated,
  // so they are added after the sum (once). Sequence parallel: to the rows' owners.
  if (sp_) {
    embedding_forward(partial_.data(), tokens, positions, emb.wte, nullptr, BT_, C_);
    tp_.comm->reduce_scatter_v(partial_.data(), out, row_counts_.data());
  } else {
    embedding_forward(out, tokens, positions, emb.wte, nullptr, BT_, C_);
    allreduce(out, BT_ * C_);
  }
  const int32_t* mine = positions + row_begin_;
  if (emb.wpe)
    parallel_for(0, rows_, [&](int64_t r) { add_inplace(out + r * C_, emb.wpe + int64_t(mine[r]) * C_, C_); });
}

void ParallelLayers::allreduce(float* data, int64_t n) {
  if (!tp_.active()) return;
  DL_PROFILE("tp.allreduce");
  tp_.comm->allreduce_sum(data, n);
}

}  // namespace distllm
