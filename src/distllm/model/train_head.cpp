#include "distllm/model/train_head.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/profiler.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/logit_softcap.h"

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

}  // namespace

TrainHead::TrainHead(const ModelConfig& shard, int vocab, int64_t BT, ParallelLayers& par, const TensorParallel& tp,
                     BlockScratch& scratch)
    : cfg_(shard), vocab_(vocab), BT_(BT), par_(par), tp_(tp), s_(scratch) {
  const int64_t C = cfg_.n_embd, rows = par_.rows();
  final_norm_.resize(static_cast<size_t>(BT_ * C));
  final_mean_.resize(static_cast<size_t>(rows));
  final_rstd_.resize(static_cast<size_t>(rows));
  losses_.resize(static_cast<size_t>(BT_));
  logits_chunk_.resize(static_cast<size_t>(head_chunk_rows(BT_, vocab_) * cfg_.vocab_size));
  if (cfg_.final_logit_softcap > 0.0f) capped_chunk_.resize(logits_chunk_.size());
}

size_t TrainHead::bytes() const {
  return (final_norm_.size() + final_mean_.size() + final_rstd_.size() + losses_.size() + logits_chunk_.size() +
          capped_chunk_.size()) *
         sizeof(float);
}

float TrainHead::forward(const HeadTensors& head, const HeadTensors& dhead, const float* final_input,
                         const int32_t* targets, const HeadLossArgs& args) {
  const int C = cfg_.n_embd, V = cfg_.vocab_size;  // V: this rank's vocabulary rows under tp
  const MatmulMode mode{WeightLayout::kOutIn, compute_};  // the head is [V, C] in every family
  par_.norm_forward(head.norm_w, head.norm_b, final_input, final_norm_.data(), final_mean_.data(),
                    final_rstd_.data());
  valid_targets_ = 0;
  for (int64_t i = 0; i < BT_; ++i) valid_targets_ += targets[i] != kIgnoreIndex;
  const int64_t normalizer = args.loss_normalizer > 0 ? args.loss_normalizer : valid_targets_;
  const float ce_scale = normalizer > 0 ? args.grad_scale / static_cast<float>(normalizer) : 0.0f;
  if (args.compute_grad) s_.dnorm.zero();
  const int64_t chunk = head_chunk_rows(BT_, vocab_);
  for (int64_t r0 = 0; r0 < BT_; r0 += chunk) {
    const int64_t rows = std::min(chunk, BT_ - r0);
    float* logits = logits_chunk_.data();
    const float* x = final_norm_.data() + r0 * C;
    {
      DL_PROFILE("head.matmul");
      matmul_forward(logits, x, head.lm_head, nullptr, rows, C, V, mode);
    }
    const float cap = cfg_.final_logit_softcap;
    if (cap > 0.0f) {
      DL_PROFILE("head.softcap");
      logit_softcap_forward(logits, rows * V, cap);
      // The cross-entropy overwrites the logits with their gradient; the tanh's
      // derivative is read from the capped values.
      if (args.compute_grad) std::memcpy(capped_chunk_.data(), logits, sizeof(float) * rows * V);
    }
    if (args.logits_out) std::memcpy(args.logits_out + r0 * V, logits, sizeof(float) * rows * V);
    if (tp_.active()) {
      DL_PROFILE("head.cross_entropy");
      vocab_parallel_cross_entropy(losses_.data() + r0, logits, targets + r0, rows, V, tp_.plan->vocab_begin(),
                                   ce_scale, args.compute_grad, *tp_.comm);
      if (!args.compute_grad) continue;
    } else if (!args.compute_grad) {
      cross_entropy_forward(losses_.data() + r0, logits, targets + r0, rows, V);
      continue;
    } else {
      DL_PROFILE("head.cross_entropy");
      cross_entropy_forward_backward(losses_.data() + r0, logits, targets + r0, rows, V, ce_scale);
    }
    if (cap > 0.0f) {
      DL_PROFILE("head.softcap");
      logit_softcap_backward(logits, capped_chunk_.data(), rows * V, cap);
    }
    DL_PROFILE("head.matmul_bwd");
    matmul_backward_input(s_.dnorm.data() + r0 * C, logits, head.lm_head, rows, C, V, mode);
    matmul_backward_weight(dhead.lm_head, nullptr, logits, x, rows, C, V, mode);
  }
  // Each rank's vocabulary rows gave part of d(final norm output).
  if (args.compute_grad) final_dnorm_ = par_.reduce_input_grad(s_.dnorm.data());
  double total = 0.0;
  for (int64_t i = 0; i < BT_; ++i) total += losses_[i];
  return normalizer > 0 ? static_cast<float>(total / static_cast<double>(normalizer)) : 0.0f;
}

void TrainHead::backward(const HeadTensors& head, const HeadTensors& dhead, const float* final_input,
                         float* dresid) {
  std::memset(dresid, 0, sizeof(float) * static_cast<size_t>(par_.rows() * cfg_.n_embd));
  par_.norm_backward(head.norm_w, dhead.norm_w, dhead.norm_b, final_dnorm_, final_input, final_mean_.data(),
                     final_rstd_.data(), dresid);
}

}  // namespace distllm
