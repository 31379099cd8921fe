#include "distllm/serve/inference_runner.h"

#include "distllm/base/error.h"

namespace distllm::serve {

InferenceRunner::InferenceRunner(std::shared_ptr<const Transformer> model, DType weight_dtype)
    : model_(std::move(model), weight_dtype) {}

KvGeometry InferenceRunner::kv_geometry() const {
  const ModelConfig& c = model_.config();
  return {c.n_layer, c.n_kv_head, c.head_dim, 4};
}

size_t InferenceRunner::kv_bytes_per_block(int block_size) const {
  return PagedKvCache::bytes_per_block(model_.config(), block_size);
}

void InferenceRunner::allocate_kv(int num_blocks, int block_size) {
  DL_CHECK(!cache_, "allocate_kv called twice");
  cache_ = std::make_unique<PagedKvCache>(model_.config(), num_blocks, block_size);
}

void InferenceRunner::execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) {
  DL_CHECK(cache_ != nullptr, "execute before allocate_kv");
  chunks_.clear();
  for (const SequenceChunk& c : batch) {
    InferenceChunk ic;
    ic.tokens = c.tokens.data();
    ic.n = static_cast<int>(c.tokens.size());
    ic.start_pos = c.start_pos;
    ic.block_table = c.block_table.data();
    ic.num_blocks = static_cast<int>(c.block_table.size());
    ic.num_logits = c.num_logits;
    chunks_.push_back(ic);
  }
  model_.forward(chunks_, *cache_, logits);
}

}  // namespace distllm::serve
