// DeviceMesh: the data/tensor/pipeline-parallel groups of an N-dimensional layout.
//
//   DeviceMesh mesh(world, {{"dp", 2}, {"tp", 2}});
//   mesh.group("tp")->allreduce(...);    // the 2 ranks sharing my dp index
//   mesh.group("dp")->allreduce(...);    // the 2 ranks sharing my tp index
//
// Ranks are laid out row-major: the last dimension varies fastest, so the innermost
// (tensor-parallel) peers are consecutive ranks, which mpirun/srun place on the same
// host and the auto backend then serves from shared memory (Megatron's order).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "distllm/comm/process_group.h"

namespace distllm::comm {

class DeviceMesh {
 public:
  // Collective over `parent`. The product of the sizes must equal parent->size();
  // names must be distinct. Subgroups inherit the parent's options.
  DeviceMesh(ProcessGroupPtr parent, std::vector<std::pair<std::string, int>> dims);

  int ndim() const { return static_cast<int>(dims_.size()); }
  const std::vector<std::pair<std::string, int>>& dims() const { return dims_; }
  int size(const std::string& dim) const;
  // This rank's index along `dim`.
  int coord(const std::string& dim) const;
  std::vector<int> coords() const { return coords_; }
  // The group of ranks that differ from this one only along `dim`, ranked by it.
  const ProcessGroupPtr& group(const std::string& dim) const;
  // Collective over the parent (every rank calls it, in the same order): the group
  // of ranks that differ from this one only along `dims`, ranked by those
  // coordinates in the order given (the last varies fastest). E.g. {"dp", "cp"}:
  // the ranks a context-parallel job reduces its gradients over.
  ProcessGroupPtr flatten(const std::vector<std::string>& dims) const;
  // Parent rank at the given coordinates.
  int rank_at(const std::vector<int>& coords) const;
  const ProcessGroupPtr& parent() const { return parent_; }

 private:
  ProcessGroupPtr parent_;
  std::vector<std::pair<std::string, int>> dims_;
  std::vector<int> coords_;
  std::vector<ProcessGroupPtr> groups_;
  size_t index(const std::string& dim) const;
};

// Parses a mesh given on the command line, "dp=2,tp=2" (any order; row-major, the
// last dimension varies fastest). Every name must be in `known`. One dimension,
// `infer`, may be left out: it becomes world_size over the product of the others.
// Throws distllm::Error naming the part that is wrong, or a product that is not
// world_size.
std::vector<std::pair<std::string, int>> parse_mesh(const std::string& text, int world_size,
                                                    const std::vector<std::string>& known, const std::string& infer);

}  // namespace distllm::comm
