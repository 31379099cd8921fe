#include "distllm/model/stage_range.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

StageRange StageRange::whole(int n_layer) { return split(n_layer, 1, 0); }

StageRange StageRange::split(int n_layer, int stages, int stage, double head_cost) {
  DL_CHECK(stages >= 1, "pipeline stages must be >= 1, got %d", stages);
  DL_CHECK(stage >= 0 && stage < stages, "pipeline stage %d outside [0, %d)", stage, stages);
  DL_CHECK(stages == 1 || stages <= n_layer,
           "pp=%d pipeline stages but the model has %d layer%s: each stage needs at least one layer", stages, n_layer,
           n_layer == 1 ? "" : "s");
  StageRange r;
  r.stage = stage, r.stages = stages, r.n_layer = n_layer;
  if (stages == 1) {
    r.end = n_layer;
    return r;
  }
  // The last stage's layer count: the one that minimises the costliest stage, and
  // then the gap to the cheapest (with no head cost, floor(n / p): the even split).
  int last = 1;
  double best_max = -1, best_gap = 0;
  for (int k = 1; k <= n_layer - (stages - 1); ++k) {
    const int rest = n_layer - k, others = stages - 1;
    const double hi = std::max(k + head_cost, static_cast<double>((rest + others - 1) / others));
    const double lo = std::min(k + head_cost, static_cast<double>(rest / others));
    if (best_max < 0 || hi < best_max - 1e-9 || (hi < best_max + 1e-9 && hi - lo < best_gap - 1e-9))
      best_max = hi, best_gap = hi - lo, last = k;
  }
  if (stage == stages - 1) {
    r.begin = n_layer - last, r.end = n_layer;
    return r;
  }
  const int rest = n_layer - last, others = stages - 1;
  const int per = rest / others, extra = rest % others;
  r.begin = stage * per + std::min(stage, extra);
  r.end = r.begin + per + (stage < extra ? 1 : 0);
  return r;
}

double StageRange::head_cost(const ModelConfig& c) {
  const double layer = static_cast<double>(c.n_embd) * (c.qkv_dim() + c.attn_dim() + c.mlp_in_dim() + c.mlp_act_dim());
  return layer > 0 ? static_cast<double>(c.vocab_size) * c.n_embd / layer : 0.0;
}

StageRange StageRange::for_model(const ModelConfig& config, int stages, int stage) {
  return split(config.n_layer, stages, stage, head_cost(config));
}

std::string StageRange::describe() const { return strprintf("stage %d/%d: ", stage, stages) + describe_layers(); }

std::string StageRange::describe_layers() const {
  std::string s = first() ? "embedding + " : "";
  s += layers() == 1 ? strprintf("layer %d", begin) : strprintf("layers %d-%d", begin, end - 1);
  if (last()) s += " + head";
  return s;
}

}  // namespace distllm
