// Which elements of a whole tensor a checkpoint slice holds. A data-parallel rank
// holds a contiguous range of every tensor's flattening, but a tensor-parallel
// shard holds a slice of the tensor itself (TensorParallelPlan): some of its rows,
// or some columns of every row. A Region names that slice, so each rank can write
// what it holds as it holds it, and a reader of any other layout (another tp size,
// or the whole model) assembles the elements it needs from the regions' runs.
//
// A region is the concatenation, along `axis`, of `ranges` of that axis (the other
// axes whole), flattened row-major: the shard's own tensor. axis -1: the whole
// tensor. Elements are addressed by their index in that flattening ("local"), or
// in the whole tensor's ("whole").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace distllm::checkpoint {

struct Region {
  int axis = -1;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) along axis, increasing
  bool whole() const { return axis < 0; }
  bool operator==(const Region&) const = default;
};

// Elements of `region` of a tensor of `shape`.
int64_t region_numel(const std::vector<int64_t>& shape, const Region& region);
// Why `region` is not a region of `shape` ("" when it is): the axis exists and the
// ranges are non-empty, increasing, disjoint and within it.
std::string region_error(const std::vector<int64_t>& shape, const Region& region);
// "rows [0, 4) + [8, 12)" style text for messages.
std::string describe_region(const Region& region);

// n consecutive elements that are consecutive in both flattenings.
struct Run {
  int64_t local = 0, whole = 0, n = 0;
};
// The runs of the region's elements [begin, end) (local indices), in increasing
// order of both indices. A valid region is assumed (region_error).
std::vector<Run> region_runs(const std::vector<int64_t>& shape, const Region& region, int64_t begin, int64_t end);

}  // namespace distllm::checkpoint
