#include "distllm/train/grad_reducer.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/kernels/vec.h"
#include "distllm/train/bf16_buffer.h"

namespace distllm {

namespace {
constexpr comm::CallOptions kAsync{.async_op = true};
}

GradReducer::GradReducer(GradReducerSetup setup) : s_(std::move(setup)) {
  DL_CHECK(s_.layout != nullptr && s_.tracker != nullptr, "GradReducer needs a layout and a tracker");
  DL_CHECK((s_.full_grads == nullptr) != (s_.shard_grads == nullptr),
           "GradReducer needs exactly one of a full gradient buffer and a gradient shard");
  DL_CHECK(s_.plan.ranks() == 1 || s_.shard_group, "a sharded plan needs a shard group");
  owned_ = s_.plan.owned(s_.shard_rank);
  bucket_of_group_.assign(s_.layout->groups().size(), -1);
  for (size_t b = 0; b < s_.buckets.size(); ++b)
    for (int g = s_.buckets[b].first_group; g <= s_.buckets[b].last_group; ++g)
      bucket_of_group_[static_cast<size_t>(g)] = static_cast<int>(b);
  for (int b : bucket_of_group_) DL_CHECK(b >= 0, "internal error: a parameter group belongs to no bucket");
  state_.resize(s_.buckets.size());
}

GradReducer::~GradReducer() {
  // Operations still queued reference our buffers: let them finish (errors were or
  // will be reported by whoever waits on the group next).
  for (auto& f : inflight_) {
    try {
      if (f.scatter) f.scatter->wait();
      if (f.replicate) f.replicate->wait();
    } catch (...) {
    }
  }
}

void GradReducer::track(int64_t delta) {
  live_bytes_ += delta;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

float* GradReducer::bucket_data(int b) {
  const Bucket& bk = s_.buckets[static_cast<size_t>(b)];
  if (s_.full_grads) return s_.full_grads + bk.range.begin;
  BucketState& st = state_[static_cast<size_t>(b)];
  if (st.grads.size() == 0) {
    st.grads.resize(static_cast<size_t>(bk.range.size()));  // zeroed: gradients accumulate
    track(static_cast<int64_t>(st.grads.size() * sizeof(float)));
  }
  return st.grads.data();
}

float* GradReducer::group_grads(int group) {
  if (s_.full_grads) return s_.full_grads + s_.layout->groups().at(static_cast<size_t>(group)).offset;
  const int b = bucket_of_group_.at(static_cast<size_t>(group));
  DL_CHECK(!state_[static_cast<size_t>(b)].launched,
           "internal error: gradients of group %d requested after its bucket was reduced", group);
  return bucket_data(b) + (s_.layout->groups()[static_cast<size_t>(group)].offset -
                           s_.buckets[static_cast<size_t>(b)].range.begin);
}

void GradReducer::group_ready(int group) {
  const int b = bucket_of_group_.at(static_cast<size_t>(group));
  if (group == s_.buckets[static_cast<size_t>(b)].first_group && !state_[static_cast<size_t>(b)].launched) launch(b);
  poll();
}

void GradReducer::launch_bucket_of(int group) {
  const int b = bucket_of_group_.at(static_cast<size_t>(group));
  if (!state_[static_cast<size_t>(b)].launched) launch(b);
  poll();
}

void GradReducer::skip_bucket_of(int group) {
  const int b = bucket_of_group_.at(static_cast<size_t>(group));
  BucketState& st = state_[static_cast<size_t>(b)];
  DL_CHECK(!st.launched, "internal error: skipping a bucket already reduced");
  st.launched = true;
  track(-static_cast<int64_t>(st.grads.size() * sizeof(float)));
  st.grads.release();
}

void GradReducer::launch_remaining() {
  for (size_t b = 0; b < state_.size(); ++b) {
    BucketState& st = state_[b];
    if (st.launched) continue;
    if (s_.full_grads || st.grads.size() > 0)
      launch(static_cast<int>(b));
    else
      st.launched = true;  // no buffer: nothing was added to it
  }
  poll();
}

void GradReducer::launch(int b) {
  const Bucket& bk = s_.buckets[static_cast<size_t>(b)];
  BucketState& st = state_[static_cast<size_t>(b)];
  DL_CHECK(!st.launched, "internal error: bucket %d reduced twice in one micro-step", b);
  if (!s_.full_grads || s_.bf16) {
    // Bucket memory is bounded: wait for the oldest reduction to free its buffers.
    poll();
    while (inflight_.size() >= kMaxInFlight) complete_front();
  }
  st.launched = true;
  float* data = bucket_data(b);
  const int64_t n = bk.range.size();
  if (s_.bf16) {
    st.bf16.resize_uninitialized(static_cast<size_t>(n));
    track(static_cast<int64_t>(st.bf16.size() * sizeof(uint16_t)));
    f32_to_bf16_buffer(data, st.bf16.data(), n);
  }
  InFlight f;
  f.bucket = b;
  if (s_.plan.ranks() > 1) {
    const int64_t offset = s_.plan.offset_in(s_.shard_rank, bk.range);
    std::vector<size_t> counts = s_.plan.counts(bk.range);
    if (s_.bf16) {
      uint16_t* in = st.bf16.data();
      f.scatter = s_.shard_group->reduce_scatter_v(in, in + offset, counts, comm::DType::kBF16, comm::ReduceOp::kSum,
                                                   kAsync);
      s_.tracker->issued(f.scatter, n * 2);
    } else {
      f.scatter = s_.shard_group->reduce_scatter_v(data, data + offset, counts, comm::DType::kF32,
                                                   comm::ReduceOp::kSum, kAsync);
      s_.tracker->issued(f.scatter, n * 4);
    }
  }
  inflight_.push_back(std::move(f));
}

void GradReducer::issue_replicate(InFlight& f) {
  f.replicate_issued = true;
  if (!s_.replicate_group || s_.replicate_group->size() == 1) return;
  const Bucket& bk = s_.buckets[static_cast<size_t>(f.bucket)];
  BucketState& st = state_[static_cast<size_t>(f.bucket)];
  const FlatRange part = owned_.intersect(bk.range);
  const int64_t offset = s_.plan.offset_in(s_.shard_rank, bk.range);
  if (s_.bf16) {
    f.replicate = s_.replicate_group->allreduce(st.bf16.data() + offset, static_cast<size_t>(part.size()),
                                                comm::DType::kBF16, comm::ReduceOp::kSum, kAsync);
    s_.tracker->issued(f.replicate, part.size() * 2);
  } else {
    f.replicate = s_.replicate_group->allreduce(bucket_data(f.bucket) + offset, static_cast<size_t>(part.size()),
                                                comm::DType::kF32, comm::ReduceOp::kSum, kAsync);
    s_.tracker->issued(f.replicate, part.size() * 4);
  }
}

void GradReducer::complete(InFlight& f) {
  const Bucket& bk = s_.buckets[static_cast<size_t>(f.bucket)];
  BucketState& st = state_[static_cast<size_t>(f.bucket)];
  const FlatRange part = owned_.intersect(bk.range);
  if (part.empty()) {
    // Nothing of this bucket is ours: just free its buffers.
  } else if (s_.full_grads) {
    const int64_t offset = part.begin - bk.range.begin;
    if (s_.bf16) bf16_to_f32_buffer(st.bf16.data() + offset, s_.full_grads + part.begin, part.size());
  } else {
    const int64_t offset = part.begin - bk.range.begin;
    float* dst = s_.shard_grads + (part.begin - owned_.begin);
    if (s_.bf16)
      bf16_accumulate_f32(st.bf16.data() + offset, dst, part.size());
    else
      kernels::add_inplace(dst, st.grads.data() + offset, part.size());
  }
  if (!s_.full_grads) {
    track(-static_cast<int64_t>(st.grads.size() * sizeof(float)));
    st.grads.release();
  }
  track(-static_cast<int64_t>(st.bf16.size() * sizeof(uint16_t)));
  st.bf16.release();
}

void GradReducer::poll() {
  for (auto& f : inflight_) {
    if (f.replicate_issued) continue;
    if (f.scatter && !f.scatter->is_completed()) break;
    if (f.scatter) s_.tracker->wait(f.scatter);  // done: rethrows a failure
    issue_replicate(f);
  }
  while (!inflight_.empty()) {
    InFlight& f = inflight_.front();
    if (!f.replicate_issued || (f.replicate && !f.replicate->is_completed())) break;
    if (f.replicate) s_.tracker->wait(f.replicate);
    complete(f);
    inflight_.pop_front();
  }
}

void GradReducer::complete_front() {
  InFlight& f = inflight_.front();
  if (!f.replicate_issued) {
    if (f.scatter) s_.tracker->wait(f.scatter);
    issue_replicate(f);
  }
  if (f.replicate) s_.tracker->wait(f.replicate);
  complete(f);
  inflight_.pop_front();
}

void GradReducer::finish() {
  for (auto& f : inflight_) {
    if (f.replicate_issued) continue;
    if (f.scatter) s_.tracker->wait(f.scatter);
    issue_replicate(f);
  }
  while (!inflight_.empty()) {
    InFlight& f = inflight_.front();
    if (f.replicate) s_.tracker->wait(f.replicate);
    complete(f);
    inflight_.pop_front();
  }
  for (auto& st : state_) {
    DL_CHECK(st.launched && st.grads.size() == 0, "internal error: a gradient bucket was never reduced");
    st.launched = false;  // the next micro-step starts over
  }
}

}  // namespace distllm
