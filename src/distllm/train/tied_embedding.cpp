#include "distllm/train/tied_embedding.h"

#include "distllm/base/aligned_buffer.h"

namespace distllm {

void sum_tied_embedding_grads(const ParamLayout& layout, const PipelineStage& pipeline, const ShardGroups& groups,
                              float* shard_grads, CommTracker& tracker) {
  const StageChunks& r = pipeline.layers;
  const int embed = layout.embed_group();
  if (!layout.head_uses_embedding() || !layout.has_group(embed) || r.is_whole()) return;
  const ParamGroup& g = layout.groups()[static_cast<size_t>(embed)];
  const FlatRange range{g.offset, g.offset + g.size};
  AlignedBuffer<float> mine(static_cast<size_t>(g.size)), theirs(static_cast<size_t>(g.size));
  groups.gather_range(shard_grads, range, mine.data(), tracker);
  const int peer = r.first() ? r.stages - 1 : 0;
  const comm::P2POp ops[2] = {
      {comm::P2POp::Kind::kSend, mine.data(), static_cast<size_t>(g.size), comm::DType::kF32, peer},
      {comm::P2POp::Kind::kRecv, theirs.data(), static_cast<size_t>(g.size), comm::DType::kF32, peer}};
  tracker.blocking(g.size * 8, [&] { pipeline.group->batch_p2p(ops); });
  const FlatRange owned = groups.owned();
  const FlatRange part = owned.intersect(range);
  if (part.empty()) return;
  float* dst = shard_grads + (part.begin - owned.begin);
  const int64_t at = part.begin - range.begin;
  for (int64_t i = 0; i < part.size(); ++i) dst[i] = mine[at + i] + theirs[at + i];  // the same sum on both stages
}

}  // namespace distllm
