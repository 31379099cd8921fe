#include "distllm/train/pipeline_parallel.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"

namespace distllm {

PipelineParallel::PipelineParallel(DataParallel& engine, TrainGraph& graph, PipelineScheduleKind kind,
                                   int micro_batches, ActivationCheckpointing checkpointing)
    : engine_(engine),
      graph_(graph),
      kind_(kind),
      m_(micro_batches),
      stage_(engine.pipeline().layers),
      group_(engine.pipeline().group),
      checkpointing_(checkpointing) {
  DL_CHECK(engine.pipeline().active(), "internal error: PipelineParallel needs a pipeline stage");
  DL_CHECK(micro_batches >= 1, "--micro-batches must be >= 1, got %d", micro_batches);
  DL_CHECK((kind == PipelineScheduleKind::kInterleaved) == (stage_.virtual_stages() > 1),
           "internal error: the %s schedule on a stage of %d model chunks", pipeline_schedule_name(kind),
           stage_.virtual_stages());
  const StageRange& first = stage_.chunks.front();
  DL_CHECK(graph.stage().begin == first.begin && graph.stage().end == first.end,
           "internal error: the training graph is not of this pipeline stage's first chunk");
  slots_.resize(stage_.chunks.size());
  for (Slots& s : slots_) s.of.assign(static_cast<size_t>(m_), -1);
  slots_[0].graphs.push_back(&graph_);
  // Every graph the step's schedule holds at once, made now, so memory is known at
  // start (and a step never allocates).
  const auto actions = pipeline_schedule(kind_, stage_.stages, stage_.stage, m_, stage_.virtual_stages());
  const std::vector<int> counts = graph_counts(kind_, stage_, m_);
  for (size_t c = 0; c < slots_.size(); ++c) {
    Slots& s = slots_[c];
    while (static_cast<int>(s.graphs.size()) < counts[c]) {
      owned_.push_back(std::make_unique<TrainGraph>(engine_.config(), graph_.batch(), graph_.full_seq_len(),
                                                    checkpointing_, engine_.tensor_parallel(),
                                                    engine_.context_parallel(), stage_.chunks[c]));
      owned_.back()->set_compute_dtype(graph_.compute_dtype());
      s.graphs.push_back(owned_.back().get());
    }
    for (int k = static_cast<int>(s.graphs.size()) - 1; k >= 0; --k) s.free.push_back(k);
  }
}

PipelineParallel::~PipelineParallel() = default;

std::vector<int> PipelineParallel::graph_counts(PipelineScheduleKind kind, const StageChunks& stage,
                                                int micro_batches) {
  const int p = stage.stages, s = stage.stage, v = stage.virtual_stages();
  const auto actions = pipeline_schedule(kind, p, s, micro_batches, v);
  std::vector<int> counts =
      graphs_per_chunk(pipeline_steps(actions, p, s, v, pairs_passes(kind, p, micro_batches)), actions, p, s, v, true);
  // Evaluation runs the forward passes alone (m batches at a time).
  const auto forwards = forward_passes(actions);
  const std::vector<int> eval = graphs_per_chunk(pipeline_steps(forwards, p, s, v, false), forwards, p, s, v, false);
  for (size_t c = 0; c < counts.size(); ++c) counts[c] = std::max({counts[c], eval[c], c == 0 ? 1 : 0});
  return counts;
}

TrainGraph& PipelineParallel::acquire(int chunk, int micro_batch) {
  Slots& s = slots_.at(static_cast<size_t>(chunk));
  DL_CHECK(!s.free.empty(), "internal error: chunk %d needs more activation sets than graphs_per_chunk planned (%zu)",
           chunk, s.graphs.size());
  int& k = s.of.at(static_cast<size_t>(micro_batch));
  DL_CHECK(k < 0, "internal error: micro-batch %d of chunk %d started twice", micro_batch, chunk);
  k = s.free.back();
  s.free.pop_back();
  return *s.graphs[static_cast<size_t>(k)];
}

TrainGraph& PipelineParallel::held(int chunk, int micro_batch) {
  const Slots& s = slots_.at(static_cast<size_t>(chunk));
  const int k = s.of.at(static_cast<size_t>(micro_batch));
  DL_CHECK(k >= 0, "internal error: micro-batch %d of chunk %d is not in flight", micro_batch, chunk);
  return *s.graphs[static_cast<size_t>(k)];
}

void PipelineParallel::release(int chunk, int micro_batch) {
  Slots& s = slots_.at(static_cast<size_t>(chunk));
  int& k = s.of.at(static_cast<size_t>(micro_batch));
  s.free.push_back(k);
  k = -1;
}

size_t PipelineParallel::activation_bytes() const {
  size_t n = 0;
  for (const Slots& s : slots_)
    for (const TrainGraph* g : s.graphs) n += g->activation_bytes();
  return n;
}

void PipelineParallel::run(const std::vector<PipelineAction>& actions, const PassFn& pass) {
  const bool training = std::any_of(actions.begin(), actions.end(), [](const PipelineAction& a) { return !a.forward; });
  const int p = stage_.stages, s = stage_.stage, chunks = p * stage_.virtual_stages();
  const auto steps =
      pipeline_steps(actions, p, s, stage_.virtual_stages(), training && pairs_passes(kind_, p, m_));
  const size_t n = static_cast<size_t>(graph_.stage_boundary_floats());
  using Kind = comm::P2POp::Kind;
  Timer wall;
  double compute = 0;
  for (const PipelineStep& step : steps) {
    std::vector<comm::P2POp> ops;
    // Sends first: a graph whose last use is this send (the input gradient's, or
    // forward only the output's) is free for a receive of the same batch, which
    // writes its input, not what the send reads.
    for (const PipelineTransfer& t : step.transfers) {
      if (!t.send) continue;
      TrainGraph& g = held(t.chunk, t.micro_batch);
      ops.push_back({Kind::kSend, const_cast<float*>(t.activation ? g.stage_output() : g.stage_input_grad()), n,
                     comm::DType::kF32, t.peer, t.tag});
      if (t.activation != training) release(t.chunk, t.micro_batch);
    }
    for (const PipelineTransfer& t : step.transfers) {
      if (t.send) continue;
      TrainGraph& g = t.activation ? acquire(t.chunk, t.micro_batch) : held(t.chunk, t.micro_batch);
      ops.push_back({Kind::kRecv, t.activation ? g.stage_input() : g.stage_output_grad(), n, comm::DType::kF32, t.peer,
                     t.tag});
    }
    if (!ops.empty()) group_->batch_p2p(ops);
    for (int i : step.passes) {
      const PipelineAction& a = actions[static_cast<size_t>(i)];
      const int c = a.chunk * p + s;  // the model chunk
      TrainGraph& g = a.forward && c == 0 ? acquire(a.chunk, a.micro_batch) : held(a.chunk, a.micro_batch);
      Timer t;
      pass(a, g, static_cast<size_t>(i));
      compute += t.seconds();
      // Last uses without a send after them.
      if (training ? (!a.forward && c == 0) : c == chunks - 1) release(a.chunk, a.micro_batch);
    }
  }
  timing_.schedule_s = wall.seconds();
  timing_.compute_s = compute;
}

double PipelineParallel::train_step(const int32_t* tokens, const int32_t* targets, int64_t loss_normalizer,
                                    const std::function<void()>& before_backward) {
  const auto actions = pipeline_schedule(kind_, stage_.stages, stage_.stage, m_, stage_.virtual_stages());
  // Each chunk's last backward: its gradients are final there.
  std::vector<size_t> last_backward(stage_.chunks.size(), 0);
  for (size_t i = 0; i < actions.size(); ++i)
    if (!actions[i].forward) last_backward[static_cast<size_t>(actions[i].chunk)] = i;
  const int64_t per_micro = static_cast<int64_t>(graph_.batch()) * graph_.seq_len();
  double loss_sum = 0;
  bool first_backward = true;
  run(actions, [&](const PipelineAction& a, TrainGraph& g, size_t i) {
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
    // Every schedule ends every stage with the last micro-batch's backward (of its
    // first chunk): its gradients are the step's, so data-parallel reductions
    // complete there. An earlier chunk's start when its own last backward is done.
    const bool sync = i + 1 == actions.size() || engine_.sync_every_micro_step();
    g.backward(engine_, engine_.hooks(true, sync));
    engine_.end_micro_step(sync);
    if (!sync && i == last_backward[static_cast<size_t>(a.chunk)])
      engine_.reduce_chunk(stage_.chunks[static_cast<size_t>(a.chunk)]);
  });
  return loss_sum;
}

std::vector<double> PipelineParallel::evaluate(const int32_t* tokens, const int32_t* targets, int batches) {
  const auto actions =
      forward_passes(pipeline_schedule(kind_, stage_.stages, stage_.stage, batches, stage_.virtual_stages()));
  const int64_t per_batch = static_cast<int64_t>(graph_.batch()) * graph_.seq_len();
  std::vector<double> sums(2 * static_cast<size_t>(batches), 0.0);
  const PipelineTiming kept = timing_;  // the step's, for stage_bubbles()
  run(actions, [&](const PipelineAction& a, TrainGraph& g, size_t) {
    const int64_t at = a.micro_batch * per_batch;
    ForwardArgs args;
    args.loss_normalizer = 1;  // the sum
    args.hooks = engine_.hooks(false, false);
    const double loss = g.forward(engine_, tokens + at, targets + at, args);
    engine_.end_forward_only();
    if (!stage_.chunks[static_cast<size_t>(a.chunk)].last()) return;
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
  std::vector<double> all(2 * static_cast<size_t>(stage_.stages));
  group_->allgather(mine, all.data(), 2, comm::DType::kF64);
  double makespan = 0;
  for (int s = 0; s < stage_.stages; ++s) makespan = std::max(makespan, all[2 * static_cast<size_t>(s) + 1]);
  std::vector<double> bubbles;
  for (int s = 0; s < stage_.stages; ++s)
    bubbles.push_back(makespan > 0 ? 1.0 - all[2 * static_cast<size_t>(s)] / makespan : 0.0);
  return bubbles;
}

}  // namespace distllm
