// The layers one pipeline rank holds: its model chunks, each a contiguous
// StageRange, in layer order. Without virtual stages a rank holds one chunk (its
// stage). With v virtual stages (the interleaved 1F1B schedule, as Megatron-LM's)
// the layers split into p*v chunks, by StageRange's split over p*v stages (so uneven
// counts put the extra layers on the earlier chunks, and a heavy output head makes
// the last chunk shorter), and rank s holds chunks s, s+p, ..., s+(v-1)p: a
// micro-batch goes round the ranks v times. Rank 0 holds chunk 0 and the embedding,
// rank p-1 the last chunk with the final norm and head.
#pragma once

#include <string>
#include <vector>

#include "distllm/model/config.h"
#include "distllm/model/stage_range.h"

namespace distllm {

struct StageChunks {
  int stage = 0, stages = 1;                     // this rank's place in the pipeline
  std::vector<StageRange> chunks{StageRange{}};  // default: the whole model

  StageChunks() = default;
  // A rank holding one chunk: the stage `one` (implicit, as a StageRange always was one).
  StageChunks(const StageRange& one);  // NOLINT(google-explicit-constructor)

  // Throws naming the sizes when the p*v chunks outnumber the layers.
  static StageChunks split(int n_layer, int stages, int stage, int virtual_stages = 1, double head_cost = 0.0);
  static StageChunks for_model(const ModelConfig& config, int stages, int stage, int virtual_stages = 1);

  int virtual_stages() const { return static_cast<int>(chunks.size()); }
  int n_layer() const { return chunks.front().n_layer; }
  bool first() const { return chunks.front().first(); }  // holds chunk 0
  bool last() const { return chunks.back().last(); }     // holds the last chunk
  bool is_whole() const { return chunks.size() == 1 && chunks.front().is_whole(); }
  bool has_layer(int layer) const;
  int layers() const;
  // As StageRange's: the first rank, and the last when the head is tied to the table.
  bool holds_embedding(bool tied) const { return first() || (last() && tied); }
  std::string describe() const;  // "stage 0/2: embedding + layers 0-1, layers 4-5 (chunks 0, 2 of 4)"
};

}  // namespace distllm
