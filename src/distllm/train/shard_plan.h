// How data-parallel training cuts the flat parameter buffer (DESIGN.md principle 3).
//
// Ownership: rank r of a sharding group of n ranks owns one contiguous, aligned
// slice of the whole flat buffer, [r*chunk, (r+1)*chunk) clipped to the buffer,
// with chunk = total/n rounded up to the alignment. Its optimizer state, gradient
// shard (ZeRO-2/3) and master parameters (ZeRO-3) are that slice. A collective over
// any range of the buffer (a bucket, a group) then moves, for each rank, the part of
// the range that rank owns: those parts are contiguous and in rank order, so the
// range is exactly the packed buffer of a reduce_scatter_v / allgatherv with the
// per-rank counts of counts(range), and a rank's own part sits at the displacement
// the collective expects for in-place use.
//
// Buckets: gradient reduction units of whole parameter groups, made in the order
// backward finishes groups (head, last layer, ..., embed) and closed once they reach
// the size cap, so a bucket is ready as soon as its last group's gradients are.
// Each bucket is one contiguous range of the flat buffer (groups with their
// alignment padding), and the buckets tile the buffer. The embedding group is
// always a bucket of its own: its dense gradient (a tied output head's) is final
// right after the head, long before the embedding's backward at the very end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distllm/model/param_layout.h"

namespace distllm {

struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  FlatRange intersect(const FlatRange& o) const;
};

class ShardPlan {
 public:
  static constexpr int64_t kAlign = 16;  // floats: 64 bytes, so shards start on cache lines

  ShardPlan() = default;
  ShardPlan(int64_t total, int ranks);

  int ranks() const { return ranks_; }
  int64_t total() const { return total_; }
  FlatRange owned(int rank) const;
  // Elements of `range` each rank owns, in rank order (they sum to range.size()).
  std::vector<size_t> counts(const FlatRange& range) const;
  // Where `rank`'s part of `range` starts inside the range's packed buffer: the
  // elements earlier ranks own (a collective's displacement for that rank).
  int64_t offset_in(int rank, const FlatRange& range) const;
  // The largest slice any rank owns.
  int64_t max_shard() const;

 private:
  int64_t total_ = 0;
  int ranks_ = 1;
  int64_t chunk_ = 0;
};

struct Bucket {
  int first_group = 0, last_group = 0;  // groups [first, last] of the layout
  FlatRange range;                      // their spans, padding included
};

// Buckets in the order they become ready (descending group index). Groups are added
// to a bucket until it holds at least cap_floats; first_cap_floats applies to the
// first bucket (PyTorch DDP uses 1 MiB there so communication starts early).
std::vector<Bucket> make_buckets(const ParamLayout& layout, int64_t cap_floats, int64_t first_cap_floats);

// The span of group g as a range.
FlatRange group_range(const ParamLayout& layout, int group);

}  // namespace distllm
