#include "distllm/serve/inference_runner.h"

#include <cstring>

#include "distllm/base/error.h"

namespace distllm::serve {

InferenceRunner::InferenceRunner(std::shared_ptr<const Transformer> model, DType weight_dtype)
    : model_(std::move(model), weight_dtype) {}

KvGeometry InferenceRunner::kv_geometry() const {
  const ModelConfig& c = model_.config();
  return {c.n_layer, c.n_kv_head, c.head_dim, 4, DType::kF32};
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

namespace {

// Where block `block`'s rows start in one layer's K or V storage, and how many floats they take.
struct BlockSpan {
  int64_t offset, floats;
};

BlockSpan block_span(const PagedKvCache& cache, int32_t block) {
  DL_CHECK(block >= 0 && block < cache.num_blocks(), "KV block %d is outside [0, %d)", block, cache.num_blocks());
  const int64_t floats = static_cast<int64_t>(cache.block_size()) * cache.kv_dim();
  return {static_cast<int64_t>(block) * floats, floats};
}

}  // namespace

void InferenceRunner::read_kv_block(int32_t block, void* out) const {
  DL_CHECK(cache_ != nullptr, "read_kv_block before allocate_kv");
  const BlockSpan s = block_span(*cache_, block);
  char* dst = static_cast<char*>(out);
  const size_t bytes = static_cast<size_t>(s.floats) * sizeof(float);
  for (int l = 0; l < model_.config().n_layer; ++l) {
    std::memcpy(dst, cache_->k_layer(l) + s.offset, bytes);
    std::memcpy(dst + bytes, cache_->v_layer(l) + s.offset, bytes);
    dst += 2 * bytes;
  }
}

void InferenceRunner::write_kv_block(int32_t block, const void* in) {
  DL_CHECK(cache_ != nullptr, "write_kv_block before allocate_kv");
  const BlockSpan s = block_span(*cache_, block);
  const char* src = static_cast<const char*>(in);
  const size_t bytes = static_cast<size_t>(s.floats) * sizeof(float);
  for (int l = 0; l < model_.config().n_layer; ++l) {
    std::memcpy(cache_->k_layer(l) + s.offset, src, bytes);
    std::memcpy(cache_->v_layer(l) + s.offset, src + bytes, bytes);
    src += 2 * bytes;
  }
}

}  // namespace distllm::serve
