#include "distllm/train/whole_model.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/train/flat_copy.h"

namespace distllm {

ParamLayout WholeModel::local_layout(const ModelConfig& config, const TensorParallel& tp, const PipelineStage& pp) {
  config.validate();
  if (tp.plan != nullptr) {
    DL_CHECK(config.to_hf_json() == tp.plan->full().to_hf_json(), "the tensor-parallel plan is for another model");
    DL_CHECK(tp.plan->size() == 1 || (tp.comm != nullptr && tp.comm->size() == tp.plan->size()),
             "tensor parallelism needs its group's collectives");
  }
  // The model this rank splits into stages: its tp shard, or the whole model.
  const ModelConfig& model = tp.plan ? tp.plan->local() : config;
  if (pp.active()) {
    DL_CHECK(pp.layers.stages == pp.group->size() && pp.layers.stage == pp.group->rank(),
             "internal error: pipeline stage %d/%d on rank %d of a pp group of %d", pp.layers.stage, pp.layers.stages,
             pp.group->rank(), pp.group->size());
    return ParamLayout(model, pp.layers);
  }
  return tp.plan ? tp.plan->local_layout() : ParamLayout(config);
}

WholeModel::WholeModel(const ModelConfig& config, const ParamLayout& local, TensorParallel tp, PipelineStage pp)
    : config_(config),
      local_(local),
      tp_(tp),
      pp_(std::move(pp)),
      whole_(tp_.plan ? tp_.plan->full_layout() : ParamLayout(config_)) {}

const ParamLayout& WholeModel::tp_shard_layout() const {
  DL_CHECK(tp_.plan != nullptr, "internal error: no tensor-parallel plan");
  return tp_.plan->local_layout();
}

std::vector<float> WholeModel::norm_weights() const {
  std::vector<float> w;
  if (!tp_.active() && !pp_.active()) return w;
  for (const ParamTensor& t : local_.tensors()) {
    float x = 1.0f;
    if (tp_.active()) x = tp_.plan->norm_weight(*tp_.plan->local_layout().find(t.name));
    // A later stage's copy of a tied embedding: the first stage's counts.
    if (pp_.active() && !pp_.layers.first() && t.group == local_.embed_group()) x = 0.0f;
    w.push_back(x);
  }
  return w;
}

int WholeModel::tp_index(const ParamTensor& t) const {
  const std::optional<int> i = tp_shard_layout().find(t.name);
  DL_CHECK(i.has_value(), "internal error: %s is not in the tensor-parallel plan", t.name.c_str());
  return *i;
}

std::vector<checkpoint::ParamSpan> WholeModel::spans() const {
  std::vector<checkpoint::ParamSpan> out;
  for (const ParamTensor& t : local_.tensors()) {
    checkpoint::ParamSpan s(t.name, t.shape, t.offset, t.numel);
    if (tp_.plan) {
      s.shape = whole_.tensor(t.name).shape;
      const TensorSlice& slice = tp_.plan->slice(tp_index(t));
      // A slice of one range spanning its axis is the whole tensor.
      const bool all = slice.replicated() ||
                       (slice.ranges.size() == 1 && slice.ranges[0].first == 0 &&
                        slice.ranges[0].second == s.shape[static_cast<size_t>(slice.axis)]);
      if (!all) s.region = checkpoint::Region{slice.axis, slice.ranges};
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool WholeModel::writes(const ParamTensor& t) const {
  if (pp_.active() && !pp_.layers.first() && t.group == local_.embed_group()) return false;
  if (!tp_.plan) return true;
  const int i = tp_index(t);
  if (tp_.plan->slice(i).replicated()) return tp_.plan->rank() == 0;
  if (tp_.plan->grad_needs_kv_sum(i)) return tp_.plan->rank() % tp_.plan->kv_replicas() == 0;
  return true;
}

void WholeModel::to_local(const float* whole, float* local) const {
  if (!pp_.active()) {
    tp_.plan->full_to_local(whole, local);
    return;
  }
  if (!tp_.plan) {
    copy_common_tensors(whole_, whole, local_, local);
    return;
  }
  // The tp shard of the whole model, then this stage's tensors of it.
  AlignedBuffer<float> shard(static_cast<size_t>(tp_shard_layout().total_size()));
  tp_.plan->full_to_local(whole, shard.data());
  copy_common_tensors(tp_shard_layout(), shard.data(), local_, local);
}

void WholeModel::gather(const float* local, float* whole, CommTracker& tracker) const {
  // The pipeline's stages assemble the model (its tp shard under tp): each writes
  // its tensors into a zeroed buffer (the tied table from the first stage only) and
  // one all-reduce over the stages sums them.
  AlignedBuffer<float> tp_shard;
  const float* assembled = local;
  if (pp_.active()) {
    const ParamLayout model = tp_.plan ? tp_shard_layout() : whole_;
    float* dst = whole;
    if (tp_.plan) {
      tp_shard.resize_uninitialized(static_cast<size_t>(model.total_size()));
      dst = tp_shard.data();
    }
    fill_zero(dst, model.total_size());
    copy_common_tensors(local_, local, model, dst, pp_.layers.first() ? -1 : model.embed_group());
    tracker.blocking(model.total_size() * 4, [&] {
      pp_.group->allreduce(dst, static_cast<size_t>(model.total_size()), comm::DType::kF32);
    });
    if (!tp_.plan) return;
    assembled = dst;
  }
  if (tp_.active()) {
    gather_tensor_parallel(*tp_.comm, *tp_.plan, assembled, whole);
  } else {
    tp_.plan->local_to_full(assembled, whole);
  }
}

}  // namespace distllm
