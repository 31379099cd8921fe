#include "distllm/train/pipeline_parallel.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"

namespace distllm {

namespace {
// Activations go down the pipeline, gradients up; distinct tags keep them apart.
constexpr int kActivationTag = 11, kGradientTag = 12;
}  // namespace

PipelineParallel::PipelineParallel(DataParallel& engine, TrainGraph& graph, PipelineScheduleKind kind,
                                   int micro_batches, ActivationCheckpointing checkpointing)
    : engine_(engine),
      graph_(graph),
      kind_(kind),
      m_(micro_batches),
      range_(engine.pipeline().range),
      group_(engine.pipeline().group),
      checkpointing_(checkpointing) {
  DL_CHECK(engine.pipeline().active(), "internal error: PipelineParallel needs a pipeline stage");
  DL_CHECK(micro_batches >= 1, "--micro-batches must be >= 1, got %d", micro_batches);
  DL_CHECK(graph.stage().begin == range_.begin && graph.stage().end == range_.end,
           "internal error: the training graph is not of this pipeline stage");
  ensure_slots(max_in_flight(pipeline_schedule(kind_, range_.stages, range_.stage, m_)));
}

PipelineParallel::~PipelineParallel() = default;

void PipelineParallel::ensure_slots(int n) {
  while (static_cast<int>(extra_.size()) + 1 < n) {
    extra_.push_back(std::make_unique<TrainGraph>(engine_.config(), graph_.batch(), graph_.full_seq_len(), checkpointing_,
                                                  engine_.tensor_parallel(), engine_.context_parallel(), range_));
    extra_.back()->set_compute_dtype(graph_.compute_dtype());
  }
}

size_t PipelineParallel::activation_bytes() const {
  size_t n = graph_.activation_bytes();
  for (const auto& g : extra_) n += g->activation_bytes();
  return n;
}

void PipelineParallel::run(const std::vector<PipelineAction>& actions,
                           const std::function<void(const PipelineAction&, TrainGraph&)>& pass) {
  bool has_backward = false;
  int most = 0;
  for (const PipelineAction& a : actions) has_backward |= !a.forward, most = std::max(most, a.micro_batch + 1);
  ensure_slots(max_in_flight(actions));
  std::vector<int> free_slots, slot_of(static_cast<size_t>(most), -1);
  for (int k = max_in_flight(actions) - 1; k >= 0; --k) free_slots.push_back(k);
  const size_t n = static_cast<size_t>(graph_.stage_boundary_floats());
  const int prev = range_.first() ? -1 : range_.stage - 1, next = range_.last() ? -1 : range_.stage + 1;
  using Kind = comm::P2POp::Kind;
  std::vector<comm::P2POp> pending;  // the previous pass's sends
  Timer wall;
  double compute = 0;
  for (const PipelineAction& a : actions) {
    int& k = slot_of[static_cast<size_t>(a.micro_batch)];
    if (a.forward) {
      DL_CHECK(!free_slots.empty(), "internal error: no activation slot free for micro-batch %d", a.micro_batch);
      k = free_slots.back();
      free_slots.pop_back();
    }
    TrainGraph& g = slot(k);
    std::vector<comm::P2POp> ops;
    ops.swap(pending);
    if (a.forward && prev >= 0) ops.push_back({Kind::kRecv, g.stage_input(), n, comm::DType::kF32, prev, kActivationTag});
    if (!a.forward && next >= 0)
      ops.push_back({Kind::kRecv, g.stage_output_grad(), n, comm::DType::kF32, next, kGradientTag});
    if (!ops.empty()) group_->batch_p2p(ops);
    Timer t;
    pass(a, g);
    compute += t.seconds();
    // Sent with the next pass's receive; the buffers stay untouched until then (a
    // freed slot's next forward receives into its input, not these).
    if (a.forward && next >= 0)
      pending.push_back({Kind::kSend, const_cast<float*>(g.stage_output()), n, comm::DType::kF32, next,
                         kActivationTag});
    if (!a.forward && prev >= 0)
      pending.push_back({Kind::kSend, const_cast<float*>(g.stage_input_grad()), n, comm::DType::kF32, prev,
                         kGradientTag});
    if (!a.forward || !has_backward) free_slots.push_back(k);
  }
  if (!pending.empty()) group_->batch_p2p(pending);
  timing_.schedule_s = wall.seconds();
  timing_.compute_s = compute;
}

double PipelineParallel::train_step(const int32_t* tokens, const int32_t* targets, int64_t loss_normalizer,
                                    const std::function<void()>& before_backward) {
  const auto actions = pipeline_schedule(kind_, range_.stages, range_.stage, m_);
  const int64_t per_micro = static_cast<int64_t>(graph_.batch()) * graph_.seq_len();
  double loss_sum = 0;
  bool first_backward = true;
  run(actions, [&](const PipelineAction& a, TrainGraph& g) {
    const int64_t at = a.micro_batch * per_micro;
    if (a.forward) {
      ForwardArgs args;
      args.compute_grad = true;
      args.loss_normalizer = loss_normalizer;
      loss_sum += g.forward(engine_, tokens + at, targets + at, args);
      return;
    }
    if (first_backward && before_backward) before_backward();
    first_backward = false;
    // Both schedules end every stage with the last micro-batch's backward: its
    // gradients are the step's, so data-parallel reductions run there.
    const bool sync = &a == &actions.back() || engine_.sync_every_micro_step();
    g.backward(engine_, engine_.hooks(true, sync));
    engine_.end_micro_step(sync);
  });
  return loss_sum;
}

std::vector<double> PipelineParallel::evaluate(const int32_t* tokens, const int32_t* targets, int batches) {
  std::vector<PipelineAction> actions;
  for (int i = 0; i < batches; ++i) actions.push_back({true, i});
  const int64_t per_batch = static_cast<int64_t>(graph_.batch()) * graph_.seq_len();
  std::vector<double> sums(2 * static_cast<size_t>(batches), 0.0);
  const PipelineTiming kept = timing_;  // the step's, for stage_bubbles()
  run(actions, [&](const PipelineAction& a, TrainGraph& g) {
    const int64_t at = a.micro_batch * per_batch;
    ForwardArgs args;
    args.loss_normalizer = 1;  // the sum
    args.hooks = engine_.hooks(false, false);
    const double loss = g.forward(engine_, tokens + at, targets + at, args);
    engine_.end_forward_only();
    if (!range_.last()) return;
    sums[2 * static_cast<size_t>(a.micro_batch)] = loss;
    sums[2 * static_cast<size_t>(a.micro_batch) + 1] = static_cast<double>(g.valid_targets());
  });
  timing_ = kept;
  sum_over_stages(sums.data(), static_cast<int>(sums.size()));
  return sums;
}

void PipelineParallel::sum_over_stages(double* values, int n) {
  group_->allreduce(values, static_cast<size_t>(n), comm::DType::kF64);
}

std::vector<double> PipelineParallel::stage_bubbles() {
  // The stages start a step together (the previous step's gradient norm is summed
  // over them); the slowest one's schedule time is the step's makespan, and each
  // stage's idle share is of that (the last stage is done before the first).
  const double mine[2] = {timing_.compute_s, timing_.schedule_s};
  std::vector<double> all(2 * static_cast<size_t>(range_.stages));
  group_->allgather(mine, all.data(), 2, comm::DType::kF64);
  double makespan = 0;
  for (int s = 0; s < range_.stages; ++s) makespan = std::max(makespan, all[2 * static_cast<size_t>(s) + 1]);
  std::vector<double> bubbles;
  for (int s = 0; s < range_.stages; ++s)
    bubbles.push_back(makespan > 0 ? 1.0 - all[2 * static_cast<size_t>(s)] / makespan : 0.0);
  return bubbles;
}

}  // namespace distllm
