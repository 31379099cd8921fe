// One pipeline stage's share of a model: a contiguous range of transformer layers,
// plus the embedding on the first stage and the final norm and output head on the
// last. The whole model is the one stage of a pipeline of one.
//
// Layers are split as evenly as possible; when they do not divide, the earlier
// stages take the extra layer, since the last stage also runs the output head.
// for_model also weighs the head: for a GPT-2 vocabulary it costs as many matmul
// FLOPs as several layers (5.5 for gpt2-124M), so the last stage gets fewer layers.
#pragma once

#include <string>

#include "distllm/model/config.h"

namespace distllm {

struct StageRange {
  int stage = 0, stages = 1;
  int begin = 0, end = 0;  // layers [begin, end)
  int n_layer = 0;         // of the whole model

  static StageRange whole(int n_layer);
  // Stage `stage` of `stages`; throws naming the sizes when there are more stages
  // than layers (a stage without a layer would only forward its input).
  // head_cost: the output head's work in layers (0: layers only). The last stage
  // gets the fewest layers that minimise the costliest stage; the others split the
  // rest evenly (extra layers on the earlier stages).
  static StageRange split(int n_layer, int stages, int stage, double head_cost = 0.0);
  // The split for `config`, weighing its head by matmul parameters (attention's
  // sequence-length term and the embedding lookup are left out).
  static StageRange for_model(const ModelConfig& config, int stages, int stage);
  static double head_cost(const ModelConfig& config);

  bool first() const { return begin == 0; }
  bool last() const { return end == n_layer; }
  bool is_whole() const { return first() && last(); }
  int layers() const { return end - begin; }
  bool has_layer(int layer) const { return layer >= begin && layer < end; }
  // The embedding table is needed by the first stage, and by the last when the
  // output head is tied to it (it keeps a copy, as Megatron-LM does).
  bool holds_embedding(bool tied) const { return first() || (last() && tied); }
  std::string describe() const;         // "stage 1/4: layers 3-5 + head"
  std::string describe_layers() const;  // "layers 3-5 + head"
};

}  // namespace distllm
