// AdamW over the flat parameter layout. Moments m and v share the parameters'
// offsets (DESIGN.md principle 3); tensors flagged weight_decay in the layout
// (matrices, embeddings) decay, norms and biases do not.
#pragma once

#include <cstdint>

#include "distllm/base/aligned_buffer.h"
#include "distllm/model/param_layout.h"

namespace distllm {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables clipping
  void validate() const;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWConfig& config);

  // One update of every parameter with learning rate lr, using (and, when clipping,
  // scaling) grads. Returns the global gradient norm before clipping.
  double step(float* params, float* grads, double lr);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const AdamWConfig& config() const { return config_; }

 private:
  const ParamLayout& layout_;
  AdamWConfig config_;
  AlignedBuffer<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace distllm
