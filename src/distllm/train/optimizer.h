// AdamW over the flat parameter layout, or over one rank's contiguous shard of it.
// Moments m and v share the parameters' offsets (DESIGN.md principle 3); tensors
// flagged weight_decay in the layout (matrices, embeddings) decay, norms and biases
// do not. Alignment padding between groups is never touched.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/model/param_layout.h"

namespace distllm {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables clipping
  void validate() const;
};

class AdamW {
 public:
  // Owns the moments of flat elements [begin, end); end < 0 means the whole buffer.
  AdamW(const ParamLayout& layout, const AdamWConfig& config, int64_t begin = 0, int64_t end = -1);

  // Single process: computes the norm of the owned gradients, clips, and updates.
  // params and grads point at flat element begin(). Returns the norm before clipping.
  double step(float* params, float* grads, double lr);

  // Sharded use: each rank sums the squares of its gradient shard, the sums are
  // added over ranks, and every rank calls update() with the same global norm
  // (clipping scales its shard of the gradients in place).
  // `tensor_weights` (one per layout tensor, optional) scales each tensor's sum:
  // tensor parallelism counts a tensor every tp rank holds a copy of only once.
  double grad_sum_of_squares(const float* grads, const std::vector<float>* tensor_weights = nullptr) const;
  void update(float* params, float* grads, double lr, double global_norm);

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const AdamWConfig& config() const { return config_; }
  size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }

 private:
  // A run of owned elements inside one tensor; offsets relative to begin_.
  struct Segment {
    int64_t offset, size;
    bool decay;
    int tensor;  // index in the layout
  };
  AdamWConfig config_;
  int64_t begin_, end_;
  std::vector<Segment> segments_;
  AlignedBuffer<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace distllm
