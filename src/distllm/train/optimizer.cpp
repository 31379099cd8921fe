#include "distllm/train/optimizer.h"

#include <cmath>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/profiler.h"
#include "distllm/kernels/adamw.h"

namespace distllm {

void AdamWConfig::validate() const {
  DL_CHECK(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got %g", beta1);
  DL_CHECK(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got %g", beta2);
  DL_CHECK(eps > 0, "adam eps must be positive, got %g", eps);
  DL_CHECK(weight_decay >= 0, "weight decay must be >= 0, got %g", weight_decay);
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config) : layout_(layout), config_(config) {
  config_.validate();
  m_.resize(static_cast<size_t>(layout.total_size()));
  v_.resize(static_cast<size_t>(layout.total_size()));
}

double AdamW::step(float* params, float* grads, double lr) {
  const auto& tensors = layout_.tensors();
  std::vector<const float*> bufs;
  std::vector<float*> mbufs;
  std::vector<int64_t> sizes;
  for (const auto& t : tensors) {
    bufs.push_back(grads + t.offset);
    mbufs.push_back(grads + t.offset);
    sizes.push_back(t.numel);
  }
  DL_PROFILE("optimizer");
  double norm = kernels::global_norm(bufs.data(), sizes.data(), static_cast<int>(bufs.size()));
  if (config_.grad_clip > 0 && std::isfinite(norm))
    kernels::clip_by_global_norm(mbufs.data(), sizes.data(), static_cast<int>(mbufs.size()), norm, config_.grad_clip);
  ++step_;
  kernels::AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.step = step_;
  for (const auto& t : tensors) {
    s.weight_decay = t.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    kernels::adamw_update(params + t.offset, grads + t.offset, m_.data() + t.offset, v_.data() + t.offset, t.numel, s);
  }
  return norm;
}

}  // namespace distllm
