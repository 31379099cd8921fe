#include "distllm/train/memory_breakdown.h"

namespace distllm {

MemoryBreakdown account_memory(const ShardingStrategy& strategy, const AdamW& optimizer,
                               const SparseEmbeddingGrads& sparse) {
  MemoryBreakdown m;
  const FlatState& s = strategy.state();
  m.params = s.params_bytes();
  m.master = s.master_bytes();
  m.grads = s.grads_bytes();
  m.optimizer = static_cast<int64_t>(optimizer.state_bytes());
  const GatherSchedule* schedule = strategy.gather_schedule();
  m.gathered_peak = schedule ? schedule->gatherer().peak_bytes() : 0;
  m.buckets_peak = strategy.reducer().peak_bytes();
  m.sparse_rows = sparse.peak_bytes();
  return m;
}

}  // namespace distllm
