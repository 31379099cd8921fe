// The single-process training loop: gradient accumulation, clipping, AdamW with a
// warmup + cosine schedule, periodic evaluation, per-step statistics.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distllm/model/train_graph.h"
#include "distllm/model/transformer.h"
#include "distllm/train/dataset.h"
#include "distllm/train/lr_schedule.h"
#include "distllm/train/optimizer.h"

namespace distllm {

struct TrainOptions {
  int batch = 8;
  int seq_len = 256;
  int grad_accum = 1;
  int64_t steps = 100;  // optimizer steps
  LrSchedule schedule;  // total_steps is set from `steps` when left at 0
  AdamWConfig adamw;
  uint64_t seed = 1337;
  int64_t eval_every = 0;  // 0: only at the end
  int eval_batches = 8;
  double time_limit_seconds = 0;  // stop early after this much training time (0: none)
  void validate() const;
};

struct StepStats {
  int64_t step = 0;  // 1-based optimizer step just completed
  double loss = 0;   // mean over the accumulated micro-batches
  double lr = 0;
  double grad_norm = 0;
  double millis = 0;
  double tokens_per_second = 0;
};

class Trainer {
 public:
  Trainer(Transformer& model, const TokenDataset& train, const TokenDataset* val, TrainOptions options);

  StepStats step();
  // Mean loss over options.eval_batches fixed validation batches (the same ones at
  // every evaluation). Requires a validation set.
  double evaluate();
  bool has_validation() const { return val_sampler_ != nullptr; }

  // Runs to options.steps (or the time limit); callbacks see every step and eval.
  void run(const std::function<void(const StepStats&)>& on_step,
           const std::function<void(int64_t step, double val_loss)>& on_eval);

  int64_t steps_done() const { return step_; }
  BatchSampler& sampler() { return *sampler_; }
  AdamW& optimizer() { return optimizer_; }
  const TrainOptions& options() const { return options_; }

 private:
  Transformer& model_;
  TrainOptions options_;
  TrainGraph graph_;
  AdamW optimizer_;
  std::unique_ptr<BatchSampler> sampler_;
  std::unique_ptr<BatchSampler> val_sampler_;
  std::vector<int32_t> tokens_, targets_;
  int64_t step_ = 0;
};

}  // namespace distllm
