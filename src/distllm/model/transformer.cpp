#include "distllm/model/transformer.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/memory_stats.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/model/block_ops.h"

namespace distllm {

namespace {

// Validates before the layout is built and the parameters allocated: a bad config
// must fail with its field named, not with bad_alloc or the OOM killer.
const ModelConfig& checked(const ModelConfig& config) {
  config.validate();
  config.check_fits(usable_memory_bytes(), "model config");
  return config;
}

}  // namespace

Transformer::Transformer(const ModelConfig& config) : config_(checked(config)), layout_(config_) {
  params_.resize(static_cast<size_t>(layout_.total_size()));
}

float* Transformer::grads() {
  if (grads_.size() == 0) grads_.resize(static_cast<size_t>(layout_.total_size()));
  return grads_.data();
}

void Transformer::zero_grad() {
  if (grads_.size() == 0) {
    grads();
    return;
  }
  float* g = grads_.data();
  int64_t n = layout_.total_size();
  constexpr int64_t kChunk = 1 << 16;
  parallel_for(0, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    int64_t lo = c * kChunk;
    std::fill(g + lo, g + std::min(n, lo + kChunk), 0.0f);
  });
}

namespace {

// GPT-2's scaled initialisation of the projections that write the residual stream.
bool is_residual_projection(TensorRole role) {
  return role == TensorRole::kAttnOutWeight || role == TensorRole::kMlpOutWeight;
}

bool is_norm_weight(TensorRole role) {
  return role == TensorRole::kAttnNormWeight || role == TensorRole::kMlpNormWeight ||
         role == TensorRole::kFinalNormWeight || role == TensorRole::kQNormWeight || role == TensorRole::kKNormWeight ||
         role == TensorRole::kAttnPostNormWeight || role == TensorRole::kMlpPostNormWeight;
}

}  // namespace

void Transformer::init_weights(uint64_t seed) { init_weights_range(layout_, seed, 0, layout_.total_size(), params()); }

void init_weights_range(const ParamLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out) {
  const auto& tensors = layout.tensors();
  const int n_layer = static_cast<int>(layout.groups().size()) - 2;
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(std::max(1, n_layer)));
  const float identity_norm = identity_norm_weight(layout.norm_kind());
  std::fill(out, out + (end - begin), 0.0f);  // padding between groups
  parallel_for(0, static_cast<int64_t>(tensors.size()), [&](int64_t k) {
    const ParamTensor& t = tensors[k];
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) return;
    float* p = out + (lo - begin);
    if (t.shape.size() == 1) {
      float value = is_norm_weight(t.role) ? identity_norm : 0.0f;
      std::fill(p, p + (hi - lo), value);
      return;
    }
    float std = is_residual_projection(t.role) ? residual_std : 0.02f;
    // normal() takes two draws, so element i starts at counter 2i.
    CounterRng rng(seed, static_cast<uint64_t>(k), 2 * static_cast<uint64_t>(lo - t.offset));
    for (int64_t i = 0; i < hi - lo; ++i) p[i] = rng.normal() * std;
  });
}

}  // namespace distllm
