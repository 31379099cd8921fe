#include "distllm/serve/engine_config.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm::serve {

int kv_blocks_for(const EngineConfig& config, const ModelRunner& runner) {
  if (config.num_blocks > 0) return config.num_blocks;
  DL_CHECK(config.block_size > 0, "--block-size must be positive, got %d", config.block_size);
  DL_CHECK(config.kv_cache_memory_gib > 0, "--kv-cache-memory must be positive, got %g GiB",
           config.kv_cache_memory_gib);
  size_t per_block = runner.kv_bytes_per_block(config.block_size);
  DL_CHECK(per_block > 0, "model runner reports 0 bytes per KV block");
  double blocks = config.kv_cache_memory_gib * 1073741824.0 / static_cast<double>(per_block);
  DL_CHECK(blocks >= 1.0, "--kv-cache-memory %g GiB holds no KV block (one block of %d tokens takes %zu bytes)",
           config.kv_cache_memory_gib, config.block_size, per_block);
  DL_CHECK(blocks < 2e9, "--kv-cache-memory %g GiB is too large", config.kv_cache_memory_gib);
  return static_cast<int>(blocks);
}

int max_model_len_for(const EngineConfig& config, const ModelRunner& runner) {
  const int len = config.max_model_len > 0 ? std::min(config.max_model_len, runner.max_context()) : runner.max_context();
  DL_CHECK(len >= 2, "max model length must be at least 2 tokens, got %d", len);
  return len;
}

}  // namespace distllm::serve
