// The training loop on one process or many: gradient accumulation, clipping, AdamW
// with a warmup + cosine schedule, periodic evaluation, per-step statistics.
//
// The trainer draws batches and runs the graph; everything that depends on how the
// model is spread over ranks (where parameters and gradients live, communication,
// the optimizer's shard) is the DataParallel object's. Decisions that must agree
// across ranks (the loss, NaN, the time limit) are made from values summed over
// every rank, so all ranks stop together.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distllm/model/train_graph.h"
#include "distllm/model/transformer.h"
#include "distllm/train/data_parallel.h"
#include "distllm/train/dataset.h"
#include "distllm/train/lr_schedule.h"
#include "distllm/train/optimizer.h"
#include "distllm/train/pipeline_parallel.h"

namespace distllm {

struct TrainOptions {
  // Bounds far above any run that fits a machine, so that an absurd value is named
  // rather than left to the allocator (the memory a run needs is checked apart).
  static constexpr int kMaxBatch = 1 << 20;
  static constexpr int kMaxMicroSteps = 1 << 16;  // grad_accum, micro_batches
  static constexpr int kMaxEvalBatches = 1 << 20;

  int batch = 8;  // sequences per micro-batch, per rank
  int seq_len = 256;
  int grad_accum = 1;
  int64_t steps = 100;  // optimizer steps
  LrSchedule schedule;  // total_steps is set from `steps` when left at 0
  AdamWConfig adamw;
  uint64_t seed = 1337;
  int64_t eval_every = 0;  // 0: only at the end
  int eval_batches = 8;
  double time_limit_seconds = 0;  // stop early after this much training time (0: none)
  ActivationCheckpointing checkpointing;
  // The linear products' dtype (TrainGraph::set_compute_dtype): bf16 where the CPU
  // has AVX512_BF16; master weights, gradients and optimizer state stay f32.
  kernels::ComputeDtype compute_dtype = kernels::ComputeDtype::kF32;
  // Pipeline parallelism (the engine holds one stage): a step is `micro_batches`
  // micro-batches of `batch` sequences run by the schedule (grad_accum must be 1).
  int micro_batches = 1;
  PipelineScheduleKind pipeline_schedule = PipelineScheduleKind::k1F1B;
  // Interleaved: model chunks per stage (the engine's pipeline stage holds them).
  int virtual_stages = 1;
  // Test hook: called with the step number between the first micro-batch's forward
  // and backward (fault-injection tests kill a rank there).
  std::function<void(int64_t step)> before_backward;
  // Set (e.g. by a signal handler) to stop after the current step; every rank stops
  // after the same step once any rank has seen it.
  const std::atomic<bool>* stop_requested = nullptr;
  void validate() const;
};

struct StepStats {
  int64_t step = 0;  // 1-based optimizer step just completed
  double loss = 0;   // mean over the accumulated micro-batches and all ranks
  double lr = 0;
  double grad_norm = 0;
  double millis = 0;
  double tokens_per_second = 0;  // the whole job's
  CommTime comm;                 // this rank's communication during the step
  bool stop_requested = false;   // some rank was asked to stop: this is the last step
  std::vector<double> stage_bubbles;  // pipelines: each stage's idle share of the schedule
  double ideal_bubble = 0;            // and (p-1)/(v*m+p-1)
};

class Trainer {
 public:
  // One process training `model` in place.
  Trainer(Transformer& model, const TokenDataset& train, const TokenDataset* val, TrainOptions options);
  // Any strategy: `engine` holds (its rank's part of) the model.
  Trainer(DataParallel& engine, const TokenDataset& train, const TokenDataset* val, TrainOptions options);

  StepStats step();
  // Mean loss over options.eval_batches fixed validation batches (the same ones at
  // every evaluation; each rank evaluates its share). A batch is batch x data-parallel
  // ranks sequences, times the micro-batches under a pipeline (the step's batch).
  // Requires a validation set.
  double evaluate();
  bool has_validation() const { return val_sampler_ != nullptr; }

  // Runs to options.steps (or the time limit); callbacks see every step and eval.
  void run(const std::function<void(const StepStats&)>& on_step,
           const std::function<void(int64_t step, double val_loss)>& on_eval);

  int64_t steps_done() const { return step_; }
  // Continues a run from a checkpoint: `step` optimizer steps done and the sampler
  // at `sampler_position` (the engine's state is restored separately).
  void restore(int64_t step, uint64_t sampler_position);
  // Sequences of the whole job per optimizer step: batch x data-parallel ranks x
  // micro-steps (accumulation steps, or a pipeline's micro-batches).
  int64_t global_batch() const;
  // Sequences every rank together has drawn so far. The sampler numbers sequences
  // globally, so this is the data position any split of the same global batch (dp
  // size, micro-batches, accumulation) continues from.
  uint64_t sequences_drawn() const;
  // The sampler position of this run that has drawn `sequences`; throws naming both
  // batches when they do not divide.
  uint64_t sampler_position_at(uint64_t sequences) const;
  // True when the last step ended early because of a stop request.
  bool stopped_by_request() const { return stopped_by_request_; }
  bool stopped_by_time_limit() const { return stopped_by_time_limit_; }
  BatchSampler& sampler() { return *sampler_; }
  DataParallel& engine() { return *engine_; }
  AdamW& optimizer() { return engine_->optimizer(); }
  const TrainOptions& options() const { return options_; }
  const TrainGraph& graph() const { return graph_; }
  PipelineParallel* pipeline() { return pipeline_.get(); }

 private:
  std::unique_ptr<DataParallel> owned_engine_;
  DataParallel* engine_;
  TrainOptions options_;
  TrainGraph graph_;  // of the engine's pipeline stage (the whole model unless pipelined)
  std::unique_ptr<PipelineParallel> pipeline_;
  std::unique_ptr<BatchSampler> sampler_;
  std::unique_ptr<BatchSampler> val_sampler_;
  std::vector<int32_t> tokens_, targets_;  // grad_accum micro-batches
  // Context parallelism: this rank's blocks of each micro-batch's sequences.
  std::vector<int32_t> block_tokens_, block_targets_;
  // The tokens and targets the graph gets for micro-batch `m` (a block of each
  // sequence under context parallelism).
  const int32_t* graph_tokens(int m);
  const int32_t* graph_targets(int m);
  void slice_block(int m);
  int64_t step_ = 0;
  double started_ = 0;
  bool stopped_by_request_ = false;
  bool stopped_by_time_limit_ = false;

  void init(const TokenDataset& train, const TokenDataset* val);
  int micro_steps() const { return pipeline_ ? options_.micro_batches : options_.grad_accum; }
  double pipeline_step(const std::vector<int64_t>& valid);
  double pipeline_evaluate();
};

}  // namespace distllm
