#include "distllm/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/profiler.h"
#include "distllm/kernels/adamw.h"

namespace distllm {

void AdamWConfig::validate() const {
  DL_CHECK(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got %g", beta1);
  DL_CHECK(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got %g", beta2);
  DL_CHECK(eps > 0, "adam eps must be positive, got %g", eps);
  DL_CHECK(weight_decay >= 0, "weight decay must be >= 0, got %g", weight_decay);
  DL_CHECK(grad_clip >= 0 && std::isfinite(grad_clip),
           "--clip (max gradient norm) must be >= 0 (0 turns clipping off), got %g", grad_clip);
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, int64_t begin, int64_t end)
    : config_(config), begin_(begin), end_(end < 0 ? layout.total_size() : end) {
  config_.validate();
  DL_CHECK(begin_ >= 0 && begin_ <= end_ && end_ <= layout.total_size(),
           "optimizer range [%lld, %lld) is outside the %lld parameters", (long long)begin_, (long long)end_,
           (long long)layout.total_size());
  for (size_t k = 0; k < layout.tensors().size(); ++k) {
    const ParamTensor& t = layout.tensors()[k];
    int64_t lo = std::max(begin_, t.offset), hi = std::min(end_, t.offset + t.numel);
    if (lo < hi) segments_.push_back({lo - begin_, hi - lo, t.weight_decay, static_cast<int>(k)});
  }
  m_.resize(static_cast<size_t>(end_ - begin_));
  v_.resize(static_cast<size_t>(end_ - begin_));
}

double AdamW::grad_sum_of_squares(const float* grads, const std::vector<float>* tensor_weights) const {
  if (tensor_weights) {
    double total = 0;
    for (const auto& s : segments_) {
      const float* buf = grads + s.offset;
      total += (*tensor_weights)[static_cast<size_t>(s.tensor)] * kernels::sum_of_squares(&buf, &s.size, 1);
    }
    return total;
  }
  std::vector<const float*> bufs;
  std::vector<int64_t> sizes;
  for (const auto& s : segments_) {
    bufs.push_back(grads + s.offset);
    sizes.push_back(s.size);
  }
  return kernels::sum_of_squares(bufs.data(), sizes.data(), static_cast<int>(bufs.size()));
}

void AdamW::update(float* params, float* grads, double lr, double global_norm) {
  DL_PROFILE("optimizer");
  if (config_.grad_clip > 0 && std::isfinite(global_norm)) {
    std::vector<float*> bufs;
    std::vector<int64_t> sizes;
    for (const auto& s : segments_) {
      bufs.push_back(grads + s.offset);
      sizes.push_back(s.size);
    }
    kernels::clip_by_global_norm(bufs.data(), sizes.data(), static_cast<int>(bufs.size()), global_norm,
                                 config_.grad_clip);
  }
  ++step_;
  kernels::AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.step = step_;
  for (const auto& seg : segments_) {
    s.weight_decay = seg.decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    kernels::adamw_update(params + seg.offset, grads + seg.offset, m_.data() + seg.offset, v_.data() + seg.offset,
                          seg.size, s);
  }
}

double AdamW::step(float* params, float* grads, double lr) {
  double norm = std::sqrt(grad_sum_of_squares(grads));
  update(params, grads, lr, norm);
  return norm;
}

}  // namespace distllm
