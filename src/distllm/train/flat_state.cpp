#include "distllm/train/flat_state.h"

#include "distllm/train/bf16_buffer.h"
#include "distllm/train/flat_copy.h"

namespace distllm {

FlatState::FlatState(const ParamLayout& layout, FlatRange owned, FlatStateSpec spec)
    : owned_(owned), total_(layout.total_size()), spec_(spec) {
  if (spec_.full_params) {
    own_params_.resize(static_cast<size_t>(total_));
    full_params_ = own_params_.data();
  }
  if (!spec_.full_params || spec_.bf16_params) {
    master_buf_.resize(static_cast<size_t>(owned_.size()));
    master_ = master_buf_.data();
  } else {
    master_ = full_params_ + owned_.begin;
  }
  if (spec_.full_grads) {
    own_grads_.resize(static_cast<size_t>(total_));
    full_grads_ = own_grads_.data();
    shard_grads_ = full_grads_ + owned_.begin;
  } else {
    shard_grads_buf_.resize(static_cast<size_t>(owned_.size()));
    shard_grads_ = shard_grads_buf_.data();
  }
}

FlatState::FlatState(Transformer& model) : owned_{0, model.size()}, total_(model.size()) {
  full_params_ = model.params();
  full_grads_ = model.grads();
  master_ = full_params_;
  shard_grads_ = full_grads_;
}

void FlatState::init_weights(const ParamLayout& layout, uint64_t seed) {
  if (full_params_) {
    // Every rank draws the same values (a pure function of the seed).
    init_weights_range(layout, seed, 0, layout.total_size(), full_params_);
    if (separate_master()) copy_floats(master_, full_params_ + owned_.begin, owned_.size());
    refresh_working_params();
  } else if (owned_.size() > 0) {
    init_weights_range(layout, seed, owned_.begin, owned_.end, master_);
  }
}

void FlatState::load(const float* flat) {
  if (full_params_) copy_floats(full_params_, flat, total_);
  if (separate_master()) copy_floats(master_, flat + owned_.begin, owned_.size());
  refresh_working_params();
}

void FlatState::refresh_working_params() {
  if (full_params_ && spec_.bf16_params && spec_.one_shard) round_to_bf16(master_, full_params_, total_);
}

void FlatState::zero_grads() {
  if (full_grads_)
    fill_zero(full_grads_, total_);
  else
    fill_zero(shard_grads_, owned_.size());
}

}  // namespace distllm
