#include "distllm/train/sparse_embedding_grads.h"

#include <algorithm>

#include "distllm/kernels/embedding.h"

namespace distllm {

SparseEmbeddingGrads::SparseEmbeddingGrads(const ModelConfig& config, const ParamLayout& layout,
                                           comm::ProcessGroupPtr world, bool context_parallel, CommTracker* tracker)
    : config_(config), layout_(layout), world_(std::move(world)), context_parallel_(context_parallel),
      tracker_(tracker) {}

void SparseEmbeddingGrads::on_backward(const float* d_out, const int32_t* tokens, const int32_t* positions,
                                       int64_t rows) {
  const int C = config_.n_embd;
  const int n = world_->size();
  // The union of the token ids every rank used (sorted, so all ranks agree on it).
  std::vector<int32_t> all(static_cast<size_t>(rows) * n);
  tracker_->blocking(rows * 4 * n, [&] {
    world_->allgather(tokens, all.data(), static_cast<size_t>(rows), comm::DType::kI32);
  });
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  // Under tensor parallelism -1 marks tokens whose rows another tp rank holds.
  all.erase(all.begin(), std::lower_bound(all.begin(), all.end(), 0));
  const int64_t token_rows = static_cast<int64_t>(all.size());
  int64_t position_rows = 0;
  if (config_.block().learned_positions())
    for (int64_t i = 0; i < rows; ++i) position_rows = std::max<int64_t>(position_rows, positions[i] + 1);
  if (config_.block().learned_positions() && context_parallel_) {
    // The ranks of a cp ring hold different positions: agree on the rows reduced.
    tracker_->blocking(8, [&] { world_->allreduce(&position_rows, 1, comm::DType::kI64, comm::ReduceOp::kMax); });
  }
  std::vector<int32_t> index(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    index[static_cast<size_t>(i)] =
        tokens[i] < 0 ? -1 : static_cast<int32_t>(std::lower_bound(all.begin(), all.end(), tokens[i]) - all.begin());
  // This rank's contribution to those rows, in the order the dense scatter adds them.
  grads_.resize(static_cast<size_t>((token_rows + position_rows) * C));
  peak_bytes_ = std::max(peak_bytes_, static_cast<int64_t>(grads_.size() * sizeof(float)));
  float* token_part = grads_.data();
  float* position_part = config_.block().learned_positions() ? token_part + token_rows * C : nullptr;
  kernels::embedding_backward(token_part, position_part, d_out, index.data(), positions, rows, C);
  tracker_->blocking(static_cast<int64_t>(grads_.size()) * 4, [&] {
    world_->allreduce(grads_.data(), grads_.size(), comm::DType::kF32);
  });
  // The embedding group holds the token table first, then gpt2's position table.
  const ParamGroup& eg = layout_.groups()[static_cast<size_t>(layout_.embed_group())];
  const int64_t wte = layout_.tensors()[static_cast<size_t>(eg.tensors[0])].offset;
  offsets_.clear();
  for (int32_t t : all) offsets_.push_back(wte + static_cast<int64_t>(t) * C);
  if (config_.block().learned_positions()) {
    const int64_t wpe = layout_.tensors()[static_cast<size_t>(eg.tensors[1])].offset;
    for (int64_t p = 0; p < position_rows; ++p) offsets_.push_back(wpe + p * C);
  }
  pending_ = true;
}

void SparseEmbeddingGrads::apply(float* shard_grads, FlatRange owned) {
  if (!pending_) return;
  pending_ = false;
  const int64_t C = config_.n_embd;
  // Added after the dense part's reduction (which works in place).
  for (size_t r = 0; r < offsets_.size(); ++r) {
    const FlatRange row = FlatRange{offsets_[r], offsets_[r] + C}.intersect(owned);
    if (row.empty()) continue;
    float* dst = shard_grads + (row.begin - owned.begin);
    const float* src = grads_.data() + static_cast<int64_t>(r) * C + (row.begin - offsets_[r]);
    for (int64_t i = 0; i < row.size(); ++i) dst[i] += src[i];
  }
  grads_.release();
}

}  // namespace distllm
