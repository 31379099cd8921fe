#include "distllm/train/shard_plan.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm {

FlatRange FlatRange::intersect(const FlatRange& o) const {
  FlatRange r{std::max(begin, o.begin), std::min(end, o.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

ShardPlan::ShardPlan(int64_t total, int ranks) : total_(total), ranks_(ranks) {
  DL_CHECK(ranks >= 1, "a sharding group needs at least one rank, got %d", ranks);
  DL_CHECK(total >= 0, "negative buffer size");
  int64_t per = (total + ranks - 1) / ranks;
  chunk_ = (per + kAlign - 1) / kAlign * kAlign;
}

FlatRange ShardPlan::owned(int rank) const {
  DL_CHECK(rank >= 0 && rank < ranks_, "rank %d outside a sharding group of %d", rank, ranks_);
  int64_t lo = std::min(total_, chunk_ * rank);
  int64_t hi = std::min(total_, chunk_ * (rank + 1));
  return {lo, hi};
}

std::vector<size_t> ShardPlan::counts(const FlatRange& range) const {
  std::vector<size_t> c(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) c[static_cast<size_t>(r)] = static_cast<size_t>(owned(r).intersect(range).size());
  return c;
}

int64_t ShardPlan::offset_in(int rank, const FlatRange& range) const {
  return std::clamp<int64_t>(owned(rank).begin - range.begin, 0, range.size());
}

int64_t ShardPlan::max_shard() const { return std::min(total_, chunk_); }

FlatRange group_range(const ParamLayout& layout, int group) {
  int64_t begin = layout.groups().at(static_cast<size_t>(group)).offset;
  return {begin, begin + layout.group_span(group)};
}

std::vector<Bucket> make_buckets(const ParamLayout& layout, int64_t cap_floats, int64_t first_cap_floats) {
  DL_CHECK(cap_floats > 0 && first_cap_floats > 0, "bucket sizes must be positive");
  std::vector<Bucket> buckets;
  const int n = static_cast<int>(layout.groups().size());
  int g = n - 1;
  while (g >= 0) {
    Bucket b;
    b.last_group = g;
    b.range = group_range(layout, g);
    const int64_t cap = buckets.empty() ? first_cap_floats : cap_floats;
    --g;
    // A group a pipeline stage does not hold (empty) is a bucket of its own, which
    // DataParallel marks reduced without communicating.
    while (g > layout.embed_group() && b.range.size() < cap && layout.has_group(g) && layout.has_group(b.last_group)) {
      b.range.begin = group_range(layout, g).begin;
      --g;
    }
    b.first_group = g + 1;
    buckets.push_back(b);
  }
  return buckets;
}

}  // namespace distllm
