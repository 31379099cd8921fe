#include "distllm/serve/inference_runner.h"

#include <cstring>

#include "distllm/base/error.h"

namespace distllm::serve {

InferenceRunner::InferenceRunner(std::shared_ptr<const ModelWeights> weights, DType weight_dtype, DType kv_dtype,
                                 InferenceTensorParallel tp)
    : model_(std::move(weights), weight_dtype, tp), kv_dtype_(kv_dtype) {
  DL_CHECK(PagedKvCache::supports(kv_dtype), "--kv-cache-dtype must be f32, bf16 or int8, not %s",
           dtype_short_name(kv_dtype));
}

// This rank's heads: under tensor parallelism each rank stores only its own.
KvGeometry InferenceRunner::kv_geometry() const {
  const ModelConfig& c = model_.shard_config();
  return {c.n_layer, c.n_kv_head, c.head_dim, static_cast<int>(dtype_size(kv_dtype_)), kv_dtype_, c.kv_window()};
}

size_t InferenceRunner::kv_bytes_per_block(int block_size) const {
  return PagedKvCache::bytes_per_block(model_.shard_config(), block_size, kv_dtype_);
}

void InferenceRunner::allocate_kv(int num_blocks, int block_size) {
  DL_CHECK(!cache_, "allocate_kv called twice");
  cache_ = std::make_unique<PagedKvCache>(model_.shard_config(), num_blocks, block_size, kv_dtype_);
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

// Where block `block`'s rows start in one layer's K or V storage, and how many bytes they take.
struct BlockSpan {
  size_t offset, bytes;
};

BlockSpan block_span(const PagedKvCache& cache, int32_t block) {
  DL_CHECK(block >= 0 && block < cache.num_blocks(), "KV block %d is outside [0, %d)", block, cache.num_blocks());
  const size_t bytes = cache.block_bytes_per_layer();
  return {static_cast<size_t>(block) * bytes, bytes};
}

}  // namespace

// The payload is the cache's own bytes (slices of kv_geometry().dtype), so a
// transfer never converts: the fingerprint's dtype makes both ends agree first.
void InferenceRunner::read_kv_block(int32_t block, void* out) const {
  DL_CHECK(cache_ != nullptr, "read_kv_block before allocate_kv");
  const BlockSpan s = block_span(*cache_, block);
  char* dst = static_cast<char*>(out);
  const PagedKvCache& cache = *cache_;
  for (int l = 0; l < model_.config().n_layer; ++l) {
    std::memcpy(dst, static_cast<const char*>(cache.k_layer(l)) + s.offset, s.bytes);
    std::memcpy(dst + s.bytes, static_cast<const char*>(cache.v_layer(l)) + s.offset, s.bytes);
    dst += 2 * s.bytes;
  }
}

void InferenceRunner::write_kv_block(int32_t block, const void* in) {
  DL_CHECK(cache_ != nullptr, "write_kv_block before allocate_kv");
  const BlockSpan s = block_span(*cache_, block);
  const char* src = static_cast<const char*>(in);
  for (int l = 0; l < model_.config().n_layer; ++l) {
    std::memcpy(static_cast<char*>(cache_->k_layer(l)) + s.offset, src, s.bytes);
    std::memcpy(static_cast<char*>(cache_->v_layer(l)) + s.offset, src + s.bytes, s.bytes);
    src += 2 * s.bytes;
  }
}

}  // namespace distllm::serve
