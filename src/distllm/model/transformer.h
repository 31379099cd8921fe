// A decoder-only transformer's parameters (and, when training, gradients) in the
// flat layout of param_layout.h.
#pragma once

#include <cstdint>
#include <string>

#include "distllm/base/aligned_buffer.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/param_source.h"

namespace distllm {

class Transformer : public ParamSource {
 public:
  explicit Transformer(const ModelConfig& config);  // parameters start at zero

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  int64_t size() const { return layout_.total_size(); }

  // Gradients are allocated on first use; zero_grad() clears them.
  float* grads();
  bool has_grads() const { return grads_.size() != 0; }
  void zero_grad();

  // The view of one named tensor (Hugging Face name).
  float* param(const std::string& name) { return params_.data() + layout_.tensor(name).offset; }
  float* grad(const std::string& name) { return grads() + layout_.tensor(name).offset; }

  // GPT-2 / Llama initialisation: N(0, 0.02) for matrices and embeddings, with
  // residual output projections (attn c_proj/o_proj, mlp c_proj/down_proj) scaled by
  // 1/sqrt(2 n_layer); norms 1, biases 0. Tensor k of the layout draws from stream k
  // of `seed`, so initial weights do not depend on thread count or layout padding.
  void init_weights(uint64_t seed);

  // ParamSource: the groups of the flat buffers.
  float* group_params(int group) override { return params() + layout_.groups().at(group).offset; }
  float* group_grads(int group) override { return grads() + layout_.groups().at(group).offset; }

 private:
  ModelConfig config_;
  ParamLayout layout_;
  AlignedBuffer<float> params_;
  AlignedBuffer<float> grads_;
};

// The initial values of flat elements [begin, end) of the layout (padding is 0), as
// init_weights draws them, written to out[0 .. end - begin). Each value is a pure
// function of (seed, tensor, element), so a rank that owns a shard initialises just
// its shard and the model is the same for any sharding.
void init_weights_range(const ParamLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out);

}  // namespace distllm
