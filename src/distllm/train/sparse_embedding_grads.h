// The embedding table's gradient on several data-parallel ranks, in two parts:
//
//   dense   a tied output head's gradient of the table, final right after the head:
//           its bucket is reduced then, overlapping all of backward (skipped when
//           it is zero everywhere: an untied table no micro-step scattered into)
//   sparse  the embedding backward's scatter into the few rows this step's tokens
//           (and gpt2's positions) use, at the very end of backward: the union of
//           every rank's token ids (all-gathered, sorted, so all agree on it), a
//           [rows, C] buffer of this rank's part, one small all-reduce, then added
//           to the reduced gradients' owned slice
//
// Reducing V x C floats for the few hundred rows a batch touches would cost more
// than the rest of the model for a large vocabulary; this costs rows x C. A
// micro-step that does not synchronise (gradient accumulation into a full buffer)
// scatters densely instead, and marks the dense part nonzero.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/comm/process_group.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/shard_plan.h"

namespace distllm {

class SparseEmbeddingGrads {
 public:
  // `world` reduces gradients together (null: one process, nothing to do); with
  // context parallelism its cp rings hold different positions (`context_parallel`).
  SparseEmbeddingGrads(const ModelConfig& config, const ParamLayout& layout, comm::ProcessGroupPtr world,
                       bool context_parallel, CommTracker* tracker);

  // Several ranks: the rows are reduced on their own (TrainHooks::embedding_backward).
  bool enabled() const { return world_ && world_->size() > 1; }

  // A step starts: no micro-step has scattered densely yet.
  void begin_step() { dense_dirty_ = false; }
  // A micro-step without synchronisation scatters its rows into the dense gradient.
  void mark_dense_scatter() { dense_dirty_ = true; }
  // Whether the dense part's bucket may be nonzero (else it is skipped).
  bool dense_part_nonzero() const { return layout_.head_uses_embedding() || dense_dirty_; }

  // The embedding backward of a synchronised micro-step: d_out [rows, C] for the
  // table rows tokens[] (and gpt2's positions[]). Collective over the world.
  void on_backward(const float* d_out, const int32_t* tokens, const int32_t* positions, int64_t rows);
  // After the dense part's reduction: adds the reduced rows, or their parts, that
  // fall in this rank's gradient slice (`owned` of the flat buffer, at `shard_grads`).
  void apply(float* shard_grads, FlatRange owned);

  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  const ModelConfig& config_;
  const ParamLayout& layout_;
  comm::ProcessGroupPtr world_;
  bool context_parallel_;
  CommTracker* tracker_;
  std::vector<int64_t> offsets_;  // flat offsets of the reduced rows
  AlignedBuffer<float> grads_;    // their sums
  bool pending_ = false;
  bool dense_dirty_ = false;
  int64_t peak_bytes_ = 0;
};

}  // namespace distllm
