#include "distllm/checkpoint/region.h"

#include <algorithm>

#include "distllm/base/strings.h"

namespace distllm::checkpoint {

namespace {

// The tensor as [outer, along, inner] around the region's axis.
struct Around {
  int64_t outer = 1, along = 1, inner = 1;
};

Around around(const std::vector<int64_t>& shape, int axis) {
  Around a;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    const int64_t n = shape[static_cast<size_t>(d)];
    if (d < axis) a.outer *= n;
    else if (d == axis) a.along = n;
    else a.inner *= n;
  }
  return a;
}

int64_t width(const Region& r) {
  int64_t w = 0;
  for (auto [b, e] : r.ranges) w += e - b;
  return w;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

int64_t region_numel(const std::vector<int64_t>& shape, const Region& region) {
  if (region.whole()) return numel_of(shape);
  const Around a = around(shape, region.axis);
  return a.outer * width(region) * a.inner;
}

std::string region_error(const std::vector<int64_t>& shape, const Region& region) {
  if (region.whole()) return region.ranges.empty() ? "" : "a whole-tensor region has no ranges";
  if (region.axis >= static_cast<int>(shape.size()))
    return strprintf("axis %d of a tensor of %zu dimensions", region.axis, shape.size());
  if (region.ranges.empty()) return "a region needs at least one range";
  const int64_t along = shape[static_cast<size_t>(region.axis)];
  int64_t at = 0;
  for (auto [b, e] : region.ranges) {
    if (b < at || e <= b || e > along)
      return strprintf("range [%lld, %lld) of axis %d (size %lld) is empty, out of order or outside it", (long long)b,
                       (long long)e, region.axis, (long long)along);
    at = e;
  }
  return "";
}

std::string describe_region(const Region& region) {
  if (region.whole()) return "the whole tensor";
  std::string s = strprintf("axis %d", region.axis);
  for (size_t k = 0; k < region.ranges.size(); ++k)
    s += strprintf("%s[%lld, %lld)", k == 0 ? " " : " + ", (long long)region.ranges[k].first,
                   (long long)region.ranges[k].second);
  return s;
}

std::vector<Run> region_runs(const std::vector<int64_t>& shape, const Region& region, int64_t begin, int64_t end) {
  std::vector<Run> runs;
  if (end <= begin) return runs;
  if (region.whole()) {
    runs.push_back({begin, begin, end - begin});
    return runs;
  }
  // Local element (o, k, i): row o of the outer dimensions, range k, element i of
  // that range's block of (e - b) * inner; one run per (o, k).
  const Around a = around(shape, region.axis);
  const int64_t row = width(region) * a.inner;  // local elements per outer row
  if (row == 0) return runs;
  for (int64_t o = begin / row; o * row < end; ++o) {
    int64_t local = o * row;
    for (auto [b, e] : region.ranges) {
      const int64_t n = (e - b) * a.inner;
      const int64_t lo = std::max(begin, local), hi = std::min(end, local + n);
      if (lo < hi) runs.push_back({lo, (o * a.along + b) * a.inner + (lo - local), hi - lo});
      local += n;
    }
  }
  return runs;
}

}  // namespace distllm::checkpoint
