// The serving engine's settings (engine.h): KV cache size, scheduling, admission
// bounds and speculative decoding.
#pragma once

#include <cstdint>

#include "distllm/serve/model_runner.h"
#include "distllm/serve/scheduler.h"
#include "distllm/serve/speculative.h"

namespace distllm::serve {

struct EngineConfig {
  int block_size = 16;
  double kv_cache_memory_gib = 1.0;  // K/V storage; the block count follows from it
  int num_blocks = 0;                // > 0: use exactly this many blocks instead
  int max_model_len = 0;             // 0: the runner's max_context
  SchedulerConfig scheduler;
  // Admission bound: running + waiting never exceeds max_num_seqs + this; a
  // submission that would pass it gets 429.
  int max_queued_requests = 256;
  bool enable_prefix_cache = true;
  bool check_invariants = false;     // recount KV references every step (tests)
  // Speculative decoding (speculative.h); off by default.
  SpeculativeConfig speculative;
  // The first request id this engine hands out (then +1 each). Engines that serve
  // one API in turn (reloadable_engine.h) take disjoint ranges.
  uint64_t first_request_id = 1;
  // Which engine this is in ServeMetrics (set_step_state's `source`): engines that
  // share one ServeMetrics take different sources.
  int metrics_source = 0;
};

// KV cache blocks for this runner: num_blocks, else what kv_cache_memory_gib holds.
// Throws distllm::Error naming the flag when the settings hold no block.
int kv_blocks_for(const EngineConfig& config, const ModelRunner& runner);
// The longest sequence served: max_model_len capped by the runner's context.
// Throws distllm::Error when that is under 2 tokens.
int max_model_len_for(const EngineConfig& config, const ModelRunner& runner);

}  // namespace distllm::serve
