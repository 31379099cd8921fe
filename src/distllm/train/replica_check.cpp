#include "distllm/train/replica_check.h"

#include <cstring>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"

namespace distllm {

namespace {

uint64_t hash_floats(const float* p, int64_t n) {
  uint64_t h = 0x243F6A8885A308D3ull ^ static_cast<uint64_t>(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    h = mix64(h ^ bits) + static_cast<uint64_t>(i);
  }
  return h;
}

}  // namespace

void check_replicas(const ReplicatedState& state, const ParamLayout& layout, int64_t step) {
  const comm::ProcessGroupPtr& group = state.group;
  if (!group || group->size() == 1) return;
  const auto& tensors = layout.tensors();
  std::vector<uint64_t> mine(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    FlatRange t = FlatRange{tensors[i].offset, tensors[i].offset + tensors[i].numel}.intersect(state.range);
    mine[i] = hash_floats(state.base + (t.begin - state.range.begin), t.size());
  }
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(group->size()));
  group->allgather(mine.data(), all.data(), mine.size() * sizeof(uint64_t), comm::DType::kU8);
  for (int r = 1; r < group->size(); ++r) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (all[static_cast<size_t>(r) * mine.size() + i] != all[i])
        throw_error(strprintf("replica check after step %lld: %s differs between rank %d and rank %d of group '%s' "
                              "(parameters diverged across data-parallel replicas)",
                              (long long)step, tensors[i].name.c_str(), group->world_ranks()[0],
                              group->world_ranks()[static_cast<size_t>(r)], group->name().c_str()));
    }
  }
}

}  // namespace distllm
