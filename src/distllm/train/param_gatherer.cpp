#include "distllm/train/param_gatherer.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/train/bf16_buffer.h"

namespace distllm {

ParamGatherer::ParamGatherer(ParamGathererSetup setup) : s_(std::move(setup)) {
  DL_CHECK(s_.layout != nullptr && s_.master != nullptr && s_.tracker != nullptr,
           "ParamGatherer needs a layout, a master shard and a tracker");
  DL_CHECK(s_.plan.ranks() == 1 || s_.shard_group, "a sharded plan needs a shard group");
  owned_ = s_.plan.owned(s_.shard_rank);
  slots_.resize(s_.layout->groups().size());
}

ParamGatherer::~ParamGatherer() {
  for (auto& s : slots_) {
    try {
      if (s.work) s.work->wait();
    } catch (...) {
    }
  }
}

int64_t ParamGatherer::bytes_of(const Slot& s) {
  return static_cast<int64_t>(s.params.size() * sizeof(float) + (s.bf16_in.size() + s.bf16_out.size()) * 2);
}

void ParamGatherer::track(int64_t delta) {
  live_bytes_ += delta;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

void ParamGatherer::prefetch(int group) {
  Slot& slot = slots_.at(static_cast<size_t>(group));
  if (slot.state != State::kFree) return;
  const FlatRange range = group_range(*s_.layout, group);
  const FlatRange part = owned_.intersect(range);
  const int64_t offset = s_.plan.offset_in(s_.shard_rank, range);
  const float* mine = part.empty() ? s_.master : s_.master + (part.begin - owned_.begin);
  slot.params.resize_uninitialized(static_cast<size_t>(range.size()));
  ++gathers_;
  if (s_.plan.ranks() == 1) {
    // Nothing to gather: this rank owns the whole group.
    if (s_.bf16)
      round_to_bf16(mine, slot.params.data(), range.size());
    else
      std::memcpy(slot.params.data(), mine, sizeof(float) * static_cast<size_t>(range.size()));
    slot.state = State::kReady;
    track(bytes_of(slot));
    return;
  }
  std::vector<size_t> counts = s_.plan.counts(range);
  if (s_.bf16) {
    slot.bf16_in.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(part.size(), 1)));
    slot.bf16_out.resize_uninitialized(static_cast<size_t>(range.size()));
    f32_to_bf16_buffer(mine, slot.bf16_in.data(), part.size());
    slot.work = s_.shard_group->allgatherv(slot.bf16_in.data(), slot.bf16_out.data(), counts, comm::DType::kBF16,
                                           {.async_op = true});
    s_.tracker->issued(slot.work, range.size() * 2);
  } else {
    // In place: our part goes where the gathered buffer expects it.
    if (part.size() > 0) std::memcpy(slot.params.data() + offset, mine, sizeof(float) * static_cast<size_t>(part.size()));
    slot.work = s_.shard_group->allgatherv(slot.params.data() + offset, slot.params.data(), counts,
                                           comm::DType::kF32, {.async_op = true});
    s_.tracker->issued(slot.work, range.size() * 4);
  }
  slot.state = State::kGathering;
  track(bytes_of(slot));
}

float* ParamGatherer::acquire(int group) {
  Slot& slot = slots_.at(static_cast<size_t>(group));
  if (slot.state == State::kFree) prefetch(group);
  if (slot.state == State::kGathering) {
    s_.tracker->wait(slot.work);
    slot.work.reset();
    if (s_.bf16) {
      bf16_to_f32_buffer(slot.bf16_out.data(), slot.params.data(), static_cast<int64_t>(slot.params.size()));
      track(-static_cast<int64_t>((slot.bf16_in.size() + slot.bf16_out.size()) * 2));
      slot.bf16_in.release();
      slot.bf16_out.release();
    }
    slot.state = State::kReady;
  }
  return slot.params.data();
}

void ParamGatherer::release(int group) {
  Slot& slot = slots_.at(static_cast<size_t>(group));
  if (slot.state == State::kFree) return;
  if (slot.work) {
    s_.tracker->wait(slot.work);  // never free a buffer a collective still writes
    slot.work.reset();
  }
  track(-bytes_of(slot));
  slot.params.release();
  slot.bf16_in.release();
  slot.bf16_out.release();
  slot.state = State::kFree;
}

void ParamGatherer::release_all() {
  for (size_t g = 0; g < slots_.size(); ++g) release(static_cast<int>(g));
}

}  // namespace distllm
