#include "distllm/model/stage_chunks.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

StageChunks::StageChunks(const StageRange& one) : stage(one.stage), stages(one.stages), chunks{one} {}

StageChunks StageChunks::split(int n_layer, int stages, int stage, int virtual_stages, double head_cost) {
  DL_CHECK(virtual_stages >= 1, "--virtual-stages must be >= 1, got %d", virtual_stages);
  if (virtual_stages == 1) return StageRange::split(n_layer, stages, stage, head_cost);
  const int n = stages * virtual_stages;
  DL_CHECK(n <= n_layer,
           "pp=%d with --virtual-stages %d makes %d model chunks but the model has %d layer%s: each chunk needs at "
           "least one layer",
           stages, virtual_stages, n, n_layer, n_layer == 1 ? "" : "s");
  DL_CHECK(stage >= 0 && stage < stages, "pipeline stage %d outside [0, %d)", stage, stages);
  StageChunks r;
  r.stage = stage, r.stages = stages;
  r.chunks.clear();
  for (int k = 0; k < virtual_stages; ++k) r.chunks.push_back(StageRange::split(n_layer, n, k * stages + stage, head_cost));
  return r;
}

StageChunks StageChunks::for_model(const ModelConfig& config, int stages, int stage, int virtual_stages) {
  return split(config.n_layer, stages, stage, virtual_stages, StageRange::head_cost(config));
}

bool StageChunks::has_layer(int layer) const {
  for (const StageRange& c : chunks)
    if (c.has_layer(layer)) return true;
  return false;
}

int StageChunks::layers() const {
  int n = 0;
  for (const StageRange& c : chunks) n += c.layers();
  return n;
}

std::string StageChunks::describe() const {
  if (chunks.size() == 1) return chunks.front().describe();
  std::string s = strprintf("stage %d/%d: ", stage, stages), which;
  for (size_t k = 0; k < chunks.size(); ++k) {
    s += (k > 0 ? ", " : "") + chunks[k].describe_layers();
    which += strprintf("%s%d", k > 0 ? ", " : "", chunks[k].stage);
  }
  return s + strprintf(" (chunks %s of %d)", which.c_str(), chunks.front().stages);
}

}  // namespace distllm
