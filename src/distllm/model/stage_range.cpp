#include "distllm/model/stage_range.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

StageRange StageRange::whole(int n_layer) { return split(n_layer, 1, 0); }

StageRange StageRange::split(int n_layer, int stages, int stage) {
  DL_CHECK(stages >= 1, "pipeline stages must be >= 1, got %d", stages);
  DL_CHECK(stage >= 0 && stage < stages, "pipeline stage %d outside [0, %d)", stage, stages);
  DL_CHECK(stages == 1 || stages <= n_layer,
           "pp=%d pipeline stages but the model has %d layer%s: each stage needs at least one layer", stages, n_layer,
           n_layer == 1 ? "" : "s");
  StageRange r;
  r.stage = stage, r.stages = stages, r.n_layer = n_layer;
  const int per = n_layer / stages, extra = n_layer % stages;
  r.begin = stage * per + std::min(stage, extra);
  r.end = r.begin + per + (stage < extra ? 1 : 0);
  return r;
}

std::string StageRange::describe() const {
  std::string s = strprintf("stage %d/%d: ", stage, stages);
  if (first()) s += "embedding + ";
  s += layers() == 1 ? strprintf("layer %d", begin) : strprintf("layers %d-%d", begin, end - 1);
  if (last()) s += " + head";
  return s;
}

}  // namespace distllm
