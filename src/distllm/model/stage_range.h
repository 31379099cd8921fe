// One pipeline stage's share of a model: a contiguous range of transformer layers,
// plus the embedding on the first stage and the final norm and output head on the
// last. The whole model is the one stage of a pipeline of one.
//
// Layers are split as evenly as possible; when they do not divide, the earlier
// stages take the extra layer, since the last stage also runs the output head (for
// a GPT-2 vocabulary, as many FLOPs as several layers).
#pragma once

#include <string>

namespace distllm {

struct StageRange {
  int stage = 0, stages = 1;
  int begin = 0, end = 0;  // layers [begin, end)
  int n_layer = 0;         // of the whole model

  static StageRange whole(int n_layer);
  // Stage `stage` of `stages`; throws naming the sizes when there are more stages
  // than layers (a stage without a layer would only forward its input).
  static StageRange split(int n_layer, int stages, int stage);

  bool first() const { return begin == 0; }
  bool last() const { return end == n_layer; }
  bool is_whole() const { return first() && last(); }
  int layers() const { return end - begin; }
  bool has_layer(int layer) const { return layer >= begin && layer < end; }
  // The embedding table is needed by the first stage, and by the last when the
  // output head is tied to it (it keeps a copy, as Megatron-LM does).
  bool holds_embedding(bool tied) const { return first() || (last() && tied); }
  std::string describe() const;  // "stage 1/4: layers 3-5 + head"
};

}  // namespace distllm
