// Runs a pipeline schedule (pipeline_schedule.h) on one stage: the forward and
// backward passes of the step's micro-batches, the activations [B*T, C] sent to the
// next model chunk and their gradients sent back, point to point over the pp group,
// with the transfers pipeline_transfers.h plans (each batch_p2p completes the
// previous unit's sends together with the receives the next unit needs, which the
// unit tests replay for deadlocks).
//
// Every (micro-batch, chunk) in flight has its own TrainGraph over the chunk's
// layers (its saved activations): the trainer's graph for the first chunk, and as
// many more as the schedule keeps in flight on this stage (GPipe: m, 1F1B:
// min(m, p - s), interleaved: the warm-up plus one, over all chunks).
//
// Gradients accumulate over the micro-batches; the loss of each is its summed
// cross-entropy over the normaliser the caller gives (the step's valid targets over
// every micro-batch and data-parallel rank), so the step's loss and gradients equal
// one process's on the whole batch. Data-parallel reductions run in the backward of
// the last micro-batch (the last pass on every stage of every schedule); with
// several chunks a chunk's reductions start after its own last backward.
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
#include "distllm/train/pipeline_transfers.h"

namespace distllm {

struct PipelineTiming {
  double schedule_s = 0;  // the schedule's wall time on this stage
  double compute_s = 0;   // of which forward and backward passes
};

class PipelineParallel {
 public:
  // `engine` holds this stage (engine.pipeline() active); `graph` is a TrainGraph of
  // the stage's first chunk, used for its first micro-batch in flight. Both outlive
  // this. The interleaved schedule needs a stage of several chunks, the others one.
  PipelineParallel(DataParallel& engine, TrainGraph& graph, PipelineScheduleKind kind, int micro_batches,
                   ActivationCheckpointing checkpointing);
  ~PipelineParallel();

  int micro_batches() const { return m_; }
  int stages() const { return stage_.stages; }
  int virtual_stages() const { return stage_.virtual_stages(); }
  double ideal_bubble() const { return ideal_bubble_fraction(stages(), m_, virtual_stages()); }
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
  // The TrainGraphs each chunk of `stage` holds (graphs_per_chunk of the step's
  // schedule, and of evaluation's forward passes): what this runner allocates.
  static std::vector<int> graph_counts(PipelineScheduleKind kind, const StageChunks& stage, int micro_batches);

 private:
  DataParallel& engine_;
  TrainGraph& graph_;
  PipelineScheduleKind kind_;
  int m_;
  StageChunks stage_;
  comm::ProcessGroupPtr group_;
  ActivationCheckpointing checkpointing_;
  PipelineTiming timing_;

  // Per chunk, its TrainGraphs (chunk 0's first is graph_), the free ones, and
  // the graph each micro-batch in flight holds.
  struct Slots {
    std::vector<TrainGraph*> graphs;
    std::vector<int> free;
    std::vector<int> of;  // by micro-batch, -1: none
  };
  std::vector<Slots> slots_;
  std::vector<std::unique_ptr<TrainGraph>> owned_;
  TrainGraph& acquire(int chunk, int micro_batch);  // a free graph (made when none is)
  TrainGraph& held(int chunk, int micro_batch);
  void release(int chunk, int micro_batch);

  using PassFn = std::function<void(const PipelineAction&, TrainGraph&, size_t index)>;
  // Runs `actions` (with backward passes: training; otherwise forward only); `pass`
  // does one forward or backward.
  void run(const std::vector<PipelineAction>& actions, const PassFn& pass);
};

}  // namespace distllm
