// A model's parameters as inference reads them, wherever they already are: a
// Transformer's flat f32 buffer, a tensor-parallel shard, or memory-mapped
// safetensors files in the files' own dtype (hf_checkpoint.h: map_hf_model). The
// model is never widened to f32 as a whole: InferenceModel packs its linears from
// spans widened on the fly, so a bf16 checkpoint served in bf16 holds bf16 only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/transformer.h"
#include "distllm/tensor/dtype.h"

namespace distllm {

// One tensor's elements, row-major in its layout shape, aligned to its dtype.
struct TensorRef {
  const void* data = nullptr;
  DType dtype = DType::kF32;  // f32, f64, f16 or bf16
};

class ModelWeights {
 public:
  // `tensors`: one per layout.tensors() entry, in that order; `keep_alive` owns the
  // memory they point into (a mapping, a Transformer). `source_check`, when given,
  // throws if the memory stopped being what it was (a mapped file rewritten in place).
  ModelWeights(const ModelConfig& config, std::vector<TensorRef> tensors, std::shared_ptr<const void> keep_alive,
               std::function<void()> source_check = nullptr);
  // A flat f32 buffer in `layout` (a Transformer's, a shard's): no copy.
  ModelWeights(const ModelConfig& config, const ParamLayout& layout, const float* params,
               std::shared_ptr<const void> keep_alive);
  static std::shared_ptr<const ModelWeights> of(std::shared_ptr<const Transformer> model);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const std::vector<TensorRef>& tensors() const { return tensors_; }
  // The flat buffer when the weights are one f32 buffer in layout(), else null.
  const float* flat_f32() const { return flat_; }
  // The dtype of the largest tensor (the embedding): what the checkpoint stores.
  DType storage_dtype() const;
  // Bytes of every tensor in its own dtype.
  int64_t bytes() const;

  // Widens flat elements [offset, offset + count) of layout() into out (alignment
  // padding between groups reads 0). Any span: a row block of one tensor, or
  // adjacent tensors together (Llama's q|k|v).
  void read_f32(int64_t offset, int64_t count, float* out) const;
  // The whole model in f32 (a copy, even when flat).
  std::unique_ptr<Transformer> to_transformer() const;

  // Throws naming the tensor and element when a weight is NaN or infinite: such a
  // model is refused when it is loaded, not by the requests that touch it. One
  // parallel pass over the weights in their own dtype.
  void check_finite(const std::string& origin) const;
  // After reading the weights (packing them, widening them): throws when the
  // source changed underneath meanwhile (see the constructor); a no-op otherwise.
  void check_source() const {
    if (source_check_) source_check_();
  }

 private:
  ModelConfig config_;
  ParamLayout layout_;
  std::vector<TensorRef> tensors_;
  const float* flat_ = nullptr;
  std::shared_ptr<const void> keep_alive_;
  std::function<void()> source_check_;
};

}  // namespace distllm
