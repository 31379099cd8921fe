// Bytes a data-parallel rank holds, by category: what `distllm plan` predicts and
// the tests compare with the allocator's count (MemoryStats). Each figure comes from
// the part that owns the memory, so a new buffer is counted where it is made.
#pragma once

#include <cstdint>

#include "distllm/train/optimizer.h"
#include "distllm/train/sharding_strategy.h"
#include "distllm/train/sparse_embedding_grads.h"

namespace distllm {

struct MemoryBreakdown {
  int64_t params = 0;     // full working parameters (none/ddp/zero1/zero2)
  int64_t master = 0;     // f32 master shard (zero3/hsdp, or bf16 master copy)
  int64_t grads = 0;      // full gradients or the gradient shard
  int64_t optimizer = 0;  // AdamW moments of the owned shard
  int64_t gathered_peak = 0;  // most gathered-group bytes alive at once (zero3/hsdp)
  int64_t buckets_peak = 0;   // most bucket/staging bytes alive at once
  int64_t sparse_rows = 0;    // the embedding rows reduced on their own (bytes)
  int64_t total() const { return params + master + grads + optimizer + gathered_peak + buckets_peak + sparse_rows; }
};

MemoryBreakdown account_memory(const ShardingStrategy& strategy, const AdamW& optimizer,
                               const SparseEmbeddingGrads& sparse);

}  // namespace distllm
