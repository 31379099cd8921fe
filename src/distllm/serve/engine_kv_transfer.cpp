// Engine's KV export and import for prefill/decode disaggregation (engine.h,
// kv_transfer/): both run on the engine thread between steps (run_on_loop), where
// the KV cache's bookkeeping is the engine's alone.
#include <algorithm>
#include <memory>

#include "distllm/serve/engine.h"

namespace distllm::serve {

std::vector<std::string> Engine::export_cached_prefix(std::vector<int32_t> tokens, int max_blocks,
                                                      double timeout_seconds) {
  auto toks = std::make_shared<std::vector<int32_t>>(std::move(tokens));
  auto out = std::make_shared<std::vector<std::string>>();
  run_on_loop(
      [this, toks, out, max_blocks] {
        std::vector<int32_t> blocks = kv_.cached_prefix_blocks(*toks);
        if (blocks.size() > static_cast<size_t>(std::max(0, max_blocks))) blocks.resize(static_cast<size_t>(std::max(0, max_blocks)));
        const size_t bytes = runner_.kv_bytes_per_block(config_.block_size);
        for (int32_t b : blocks) {
          std::string data(bytes, '\0');
          runner_.read_kv_block(b, data.data());
          out->push_back(std::move(data));
        }
      },
      timeout_seconds);
  return std::move(*out);
}

int Engine::import_prefix(std::vector<int32_t> tokens, std::vector<std::string> blocks, double timeout_seconds) {
  auto toks = std::make_shared<std::vector<int32_t>>(std::move(tokens));
  auto data = std::make_shared<std::vector<std::string>>(std::move(blocks));
  auto cached = std::make_shared<int>(0);
  run_on_loop(
      [this, toks, data, cached] {
        const size_t bytes = runner_.kv_bytes_per_block(config_.block_size);
        for (const std::string& b : *data)
          DL_CHECK(b.size() == bytes, "KV block of %zu bytes, this model's take %zu", b.size(), bytes);
        *cached = kv_.import_prefix(*toks, static_cast<int>(data->size()), [&](int i, int32_t block) {
          runner_.write_kv_block(block, (*data)[static_cast<size_t>(i)].data());
        });
        if (config_.check_invariants) kv_.check_invariants();
      },
      timeout_seconds);
  return *cached;
}

}  // namespace distllm::serve
