// Inside plan/: what one rank's training graph holds and computes, from the model's
// shapes alone (no buffer is allocated), for estimate.cpp.
#pragma once

#include <cstdint>

#include "distllm/model/config.h"
#include "distllm/model/stage_range.h"
#include "distllm/model/train_graph.h"

namespace distllm::plan {

// One TrainGraph's shape on a rank.
struct GraphShape {
  const ModelConfig* local = nullptr;  // the tensor-parallel shard's sizes
  const ModelConfig* full = nullptr;   // the whole model
  int batch = 1, seq = 1;              // seq: the whole sequence
  int cp = 1;                          // each rank holds seq / cp of its tokens
  int64_t rows = 0;                    // residual-stream rows held (1/tp of them with sp)
  bool sp = false;
  int kv_replicas = 1;  // tp ranks sharing a key/value head (>1: the graph sums their gradients)
  ActivationCheckpointing checkpointing;
  StageRange stage;
  int local_len() const { return seq / cp; }
  int64_t tokens() const { return static_cast<int64_t>(batch) * local_len(); }
};

// Bytes TrainGraph (and its RingAttention under cp) allocates for `g`.
int64_t activation_bytes(const GraphShape& g);
// Bytes RingAttention allocates: the travelling key/value(/gradient) blocks and one
// chunk pair's partial results.
int64_t ring_buffer_bytes(const ModelConfig& local, int batch, int seq, int cp);

// FLOPs of one token's forward + backward on a stage's layers (PaLM's count: the
// matmul parameters, the head's on the last stage, and attention over the whole
// sequence `seq`), plus the forward of its layers recomputed under activation
// checkpointing.
double flops_per_token(const ModelConfig& c, int seq, const ActivationCheckpointing& ckpt, const StageRange& stage);

}  // namespace distllm::plan
