#include "distllm/train/model_parallel_groups.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

std::string ModelParallelGroups::describe() const {
  if (!mesh) return "";
  std::string shape;
  for (const auto& [name, n] : mesh->dims()) {
    shape += strprintf("%s%s=%d", shape.empty() ? "" : " x ", name.c_str(), n);
  }
  return shape;
}

namespace {

std::vector<std::pair<std::string, int>> parse(const std::string& mesh_text, int world_size) {
  return comm::parse_mesh(mesh_text, world_size, {"dp", "tp", "pp", "cp"}, "dp");
}

}  // namespace

int data_parallel_size(const std::string& mesh_text, int world_size) {
  if (mesh_text.empty()) return world_size;
  for (const auto& [name, n] : parse(mesh_text, world_size))
    if (name == "dp") return n;
  return 1;
}

int gradient_reduction_size(const std::string& mesh_text, int world_size) {
  if (mesh_text.empty()) return world_size;
  int n = 1;
  for (const auto& [name, size] : parse(mesh_text, world_size))
    if (name == "dp" || name == "cp") n *= size;
  return n;
}

ModelParallelGroups make_model_parallel_groups(const std::string& mesh_text, const comm::ProcessGroupPtr& world,
                                               const ModelConfig& config, bool sequence_parallel, int virtual_stages) {
  ModelParallelGroups g;
  g.data_parallel = world;
  g.sequence_parallel = sequence_parallel;
  DL_CHECK(!sequence_parallel || !mesh_text.empty(), "--sequence-parallel needs a --mesh with tp > 1");
  DL_CHECK(virtual_stages == 1 || !mesh_text.empty(), "--virtual-stages %d needs pipeline parallelism (--mesh pp=P)",
           virtual_stages);
  if (mesh_text.empty()) return g;
  const int world_size = world ? world->size() : 1;
  auto dims = parse(mesh_text, world_size);
  int tp = 1, cp = 1, pp = 1;
  for (const auto& [name, n] : dims) {
    if (name == "tp") tp = n;
    if (name == "cp") cp = n;
    if (name == "pp") pp = n;
  }
  DL_CHECK(!sequence_parallel || tp > 1, "--sequence-parallel needs a --mesh with tp > 1 (got %s)", mesh_text.c_str());
  // Refuse a model the tp size cannot split, or pp cannot, before any group is made.
  TensorParallelPlan check(config, tp, 0);
  DL_CHECK(virtual_stages == 1 || pp > 1, "--virtual-stages %d needs pipeline parallelism (--mesh pp=P, got %s)",
           virtual_stages, mesh_text.c_str());
  StageChunks::for_model(config, pp, 0, virtual_stages);
  if (!world) return g;  // one process: a mesh of ones
  g.mesh = std::make_unique<comm::DeviceMesh>(world, dims);
  const bool has_cp = std::any_of(dims.begin(), dims.end(), [](const auto& d) { return d.first == "cp"; });
  g.data_parallel = has_cp ? g.mesh->flatten({"dp", "cp"}) : g.mesh->group("dp");
  if (cp > 1) g.cp_comm = std::make_unique<comm::GroupContextParallelComm>(g.mesh->group("cp"));
  if (tp > 1) {
    g.plan.emplace(config, tp, g.mesh->coord("tp"));
    g.tp_comm = std::make_unique<comm::GroupTensorParallelComm>(g.mesh->group("tp"));
  }
  if (pp > 1) {
    g.pipeline.group = g.mesh->group("pp");
    g.pipeline.layers = StageChunks::for_model(config, pp, g.mesh->coord("pp"), virtual_stages);
  }
  return g;
}

}  // namespace distllm
