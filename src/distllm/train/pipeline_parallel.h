// Runs a pipeline schedule (pipeline_schedule.h) on one stage: the forward and
// backward passes of the step's micro-batches, the activations [B*T, C] sent to the
// next stage and their gradients sent back, point to point over the pp group.
//
// Each pass first completes, in one batch_p2p, the sends of the pass before it and
// the receive it needs (Megatron-LM's send_forward_recv_backward and friends), so
// two neighbours that exchange in both directions never wait on each other's send.
// Every micro-batch in flight has its own TrainGraph (its saved activations): the
// trainer's graph and as many more as the schedule keeps in flight on this stage
// (GPipe: m, 1F1B: min(m, p - s)).
//
// Gradients accumulate over the micro-batches; the loss of each is its summed
// cross-entropy over the normaliser the caller gives (the step's valid targets over
// every micro-batch and data-parallel rank), so the step's loss and gradients equal
// one process's on the whole batch. Data-parallel reductions run in the backward of
// the last micro-batch (the last pass on every stage of both schedules).
//
// Each step also measures every stage's bubble: the share of the step's schedule
// (from the common start to the last stage to finish) it spends outside forward
// and backward passes (waiting for neighbours, and sending).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distllm/model/train_graph.h"
#include "distllm/train/data_parallel.h"
#include "distllm/train/pipeline_schedule.h"

namespace distllm {

struct PipelineTiming {
  double schedule_s = 0;  // the schedule's wall time on this stage
  double compute_s = 0;   // of which forward and backward passes
};

class PipelineParallel {
 public:
  // `engine` holds this stage (engine.pipeline() active); `graph` is a TrainGraph of
  // the stage, used for the first micro-batch in flight. Both outlive this.
  PipelineParallel(DataParallel& engine, TrainGraph& graph, PipelineScheduleKind kind, int micro_batches,
                   ActivationCheckpointing checkpointing);
  ~PipelineParallel();

  int micro_batches() const { return m_; }
  int stages() const { return range_.stages; }
  PipelineScheduleKind kind() const { return kind_; }

  // One step's forward and backward over micro_batches() micro-batches; tokens and
  // targets hold them back to back ([m, B, T] each; the first stage reads tokens,
  // the last targets). Returns the summed loss of the micro-batches on the last
  // stage, 0 on the others. `before_backward` (may be empty) runs before the
  // stage's first backward pass (fault-injection tests).
  double train_step(const int32_t* tokens, const int32_t* targets, int64_t loss_normalizer,
                    const std::function<void()>& before_backward);
  // Forward only over `batches` batches back to back: the summed loss and the valid
  // targets of each, on every stage (2 * batches values).
  std::vector<double> evaluate(const int32_t* tokens, const int32_t* targets, int batches);

  // Sums values over the stages (in place).
  void sum_over_stages(double* values, int n);
  const PipelineTiming& timing() const { return timing_; }
  // Every stage's bubble share in the last step (collective over the pp group).
  std::vector<double> stage_bubbles();
  size_t activation_bytes() const;

 private:
  DataParallel& engine_;
  TrainGraph& graph_;
  PipelineScheduleKind kind_;
  int m_;
  StageRange range_;
  comm::ProcessGroupPtr group_;
  ActivationCheckpointing checkpointing_;
  std::vector<std::unique_ptr<TrainGraph>> extra_;  // slots 1..
  PipelineTiming timing_;

  struct Pass;
  TrainGraph& slot(int k) { return k == 0 ? graph_ : *extra_[static_cast<size_t>(k - 1)]; }
  void ensure_slots(int n);
  // Runs `actions`; `pass` does one forward or backward on a slot.
  void run(const std::vector<PipelineAction>& actions, const std::function<void(const PipelineAction&, TrainGraph&)>& pass);
};

}  // namespace distllm
