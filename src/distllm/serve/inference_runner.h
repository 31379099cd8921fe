// The ModelRunner over distllm's inference model: one batched, batch-invariant
// forward (model/inference.h) over the paged K/V storage (model/kv_cache.h).
#pragma once

#include <memory>

#include "distllm/model/inference.h"
#include "distllm/model/kv_cache.h"
#include "distllm/serve/model_runner.h"

namespace distllm::serve {

class InferenceRunner : public ModelRunner {
 public:
  // weight_dtype: how the linears are stored (InferenceModel). kv_dtype: how the
  // paged K/V cache stores its elements (f32, bf16 or int8, --kv-cache-dtype); it sets
  // kv_geometry().dtype, the bytes per block and so the KV transfer fingerprint.
  // tp: this rank's tensor-parallel shard (model/inference.h); its cache then holds
  // only this rank's key/value heads, and every execute() is collective over the tp
  // group (serve/tp_runner.h drives the other ranks).
  explicit InferenceRunner(std::shared_ptr<const ModelWeights> weights, DType weight_dtype = DType::kF32,
                           DType kv_dtype = DType::kF32, InferenceTensorParallel tp = {});
  explicit InferenceRunner(std::shared_ptr<const Transformer> model, DType weight_dtype = DType::kF32,
                           DType kv_dtype = DType::kF32, InferenceTensorParallel tp = {})
      : InferenceRunner(ModelWeights::of(std::move(model)), weight_dtype, kv_dtype, tp) {}

  KvGeometry kv_geometry() const override;
  size_t kv_bytes_per_block(int block_size) const override;
  void allocate_kv(int num_blocks, int block_size) override;
  int vocab_size() const override { return model_.config().vocab_size; }
  int max_context() const override { return model_.config().max_position; }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override;
  void read_kv_block(int32_t block, void* out) const override;
  void write_kv_block(int32_t block, const void* in) override;
  DType kv_dtype() const { return kv_dtype_; }

 private:
  InferenceModel model_;
  DType kv_dtype_ = DType::kF32;
  std::unique_ptr<PagedKvCache> cache_;
  std::vector<InferenceChunk> chunks_;
};

}  // namespace distllm::serve
