#include "distllm/train/trainer.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"
#include "distllm/kernels/cross_entropy.h"

namespace distllm {

namespace {

// sums: each evaluation batch's summed loss and valid targets (over all ranks); the
// mean of the batches' means, as one process with the whole batch computes it.
double mean_of_batch_means(const std::vector<double>& sums, int batches) {
  double mean = 0;
  for (int i = 0; i < batches; ++i) mean += sums[2 * i + 1] > 0 ? sums[2 * i] / sums[2 * i + 1] : 0.0;
  return mean / batches;
}

}  // namespace

void TrainOptions::validate() const {
  DL_CHECK(batch > 0, "batch size must be positive, got %d", batch);
  DL_CHECK(batch <= kMaxBatch, "batch size %d is larger than the maximum %d", batch, kMaxBatch);
  DL_CHECK(seq_len > 0, "sequence length must be positive, got %d", seq_len);
  DL_CHECK(grad_accum > 0, "gradient accumulation steps must be positive, got %d", grad_accum);
  DL_CHECK(grad_accum <= kMaxMicroSteps, "%d gradient accumulation steps is more than the maximum %d", grad_accum,
           kMaxMicroSteps);
  DL_CHECK(micro_batches > 0, "--micro-batches must be positive, got %d", micro_batches);
  DL_CHECK(micro_batches <= kMaxMicroSteps, "--micro-batches %d is more than the maximum %d", micro_batches,
           kMaxMicroSteps);
  DL_CHECK(steps > 0, "steps must be positive, got %lld", (long long)steps);
  DL_CHECK(eval_every >= 0, "eval interval must be >= 0, got %lld", (long long)eval_every);
  DL_CHECK(eval_batches > 0, "eval batches must be positive, got %d", eval_batches);
  DL_CHECK(eval_batches <= kMaxEvalBatches, "%d eval batches is more than the maximum %d", eval_batches,
           kMaxEvalBatches);
  DL_CHECK(time_limit_seconds >= 0, "time limit must be >= 0, got %g", time_limit_seconds);
  schedule.validate();
  adamw.validate();
  kernels::check_compute_dtype(compute_dtype);
}

Trainer::Trainer(Transformer& model, const TokenDataset& train, const TokenDataset* val, TrainOptions options)
    : owned_engine_(std::make_unique<DataParallel>(model, options.adamw)),
      engine_(owned_engine_.get()),
      options_(std::move(options)),
      graph_(model.config(), options_.batch, options_.seq_len, options_.checkpointing) {
  graph_.set_compute_dtype(options_.compute_dtype);
  init(train, val);
}

Trainer::Trainer(DataParallel& engine, const TokenDataset& train, const TokenDataset* val, TrainOptions options)
    : engine_(&engine),
      options_(std::move(options)),
      graph_(engine.config(), options_.batch, options_.seq_len, options_.checkpointing, engine.tensor_parallel(),
             engine.context_parallel(), engine.pipeline().layers.chunks.front()) {
  graph_.set_compute_dtype(options_.compute_dtype);  // before the pipeline copies the graph
  if (engine.pipeline().active()) {
    DL_CHECK(options_.grad_accum == 1,
             "--grad-accum %d with pipeline parallelism: use --micro-batches (the pipeline's micro-batches)",
             options_.grad_accum);
    DL_CHECK(engine.pipeline().layers.virtual_stages() == options_.virtual_stages,
             "internal error: --virtual-stages %d but the pipeline stage holds %d model chunks", options_.virtual_stages,
             engine.pipeline().layers.virtual_stages());
    check_pipeline_schedule(options_.pipeline_schedule, engine.pipeline().layers.stages, options_.micro_batches,
                            options_.virtual_stages);
    pipeline_ = std::make_unique<PipelineParallel>(engine, graph_, options_.pipeline_schedule, options_.micro_batches,
                                                   options_.checkpointing);
  }
  init(train, val);
}

void Trainer::init(const TokenDataset& train, const TokenDataset* val) {
  if (options_.schedule.total_steps <= 1) options_.schedule.total_steps = options_.steps;
  options_.validate();
  const int vocab = engine_->config().vocab_size;
  const int rank = engine_->data_rank(), world = engine_->data_ranks();
  train.check_tokens_below(vocab);
  sampler_ = std::make_unique<BatchSampler>(train, options_.batch, options_.seq_len, options_.seed, rank, world);
  if (val != nullptr) {
    val->check_tokens_below(vocab);
    val_sampler_ =
        std::make_unique<BatchSampler>(*val, options_.batch, options_.seq_len, options_.seed + 1, rank, world);
  }
  size_t n = static_cast<size_t>(options_.batch) * options_.seq_len * micro_steps();
  tokens_.resize(n);
  targets_.resize(n);
  // Context parallelism: each micro-batch's (or validation batch's) tokens this rank holds.
  block_tokens_.resize(n / static_cast<size_t>(options_.seq_len) * static_cast<size_t>(graph_.seq_len()));
  block_targets_.resize(block_tokens_.size());
  started_ = now_seconds();
}

StepStats Trainer::step() {
  Timer timer;
  DataParallel& dp = *engine_;
  const int K = micro_steps();
  const int64_t per_micro = static_cast<int64_t>(options_.batch) * options_.seq_len;
  dp.begin_step();
  // Draw every micro-batch first: the loss of each is normalised by its valid
  // targets over all ranks, which one small all-reduce gives for the whole step.
  std::vector<int64_t> valid(K);
  for (int m = 0; m < K; ++m) {
    sampler_->next(tokens_.data() + m * per_micro, targets_.data() + m * per_micro);
    slice_block(m);
    const int32_t* tgt = graph_targets(m);
    for (int64_t i = 0; i < static_cast<int64_t>(options_.batch) * graph_.seq_len(); ++i)
      valid[m] += tgt[i] != kernels::kIgnoreIndex;
  }
  dp.allreduce_sum(valid.data(), K);
  double loss_sum = 0;
  for (int m = 0; m < K && !pipeline_; ++m) {
    const bool sync = m == K - 1 || dp.sync_every_micro_step();
    ForwardArgs args;
    args.compute_grad = true;
    args.grad_scale = 1.0f / static_cast<float>(K);
    args.loss_normalizer = valid[m] > 0 ? valid[m] : 1;
    args.hooks = dp.hooks(true, sync);
    loss_sum += graph_.forward(dp, graph_tokens(m), graph_targets(m), args);
    if (m == 0 && options_.before_backward) options_.before_backward(step_ + 1);
    graph_.backward(dp, args.hooks);
    dp.end_micro_step(sync);
  }
  // One all-reduce for the loss and the stop decision (the time limit is rank 0's
  // clock, so every rank stops after the same step).
  if (pipeline_) loss_sum = pipeline_step(valid);
  // The time budget is one clock's (the first stage's data-parallel rank 0), so every
  // rank stops after the same step and follows the same learning rate; the tensor-
  // parallel ranks of that stage take the latest of their clocks.
  double stats[3] = {loss_sum, 0.0, 0.0};
  const bool clock = dp.rank() == 0 && (!pipeline_ || engine_->pipeline().layers.first());
  if (clock && options_.time_limit_seconds > 0)
    stats[1] = (now_seconds() - started_) / options_.time_limit_seconds;
  if (options_.stop_requested && options_.stop_requested->load()) stats[2] = 1.0;
  dp.allreduce_sum(stats, 3);
  // The last stage has the loss; the first stage the clock: all see the sums.
  if (pipeline_) pipeline_->sum_over_stages(stats, 3);
  if (const TensorParallel& tp = engine_->tensor_parallel(); tp.active()) {
    float shared[2] = {static_cast<float>(stats[1]), static_cast<float>(stats[2])};
    tp.comm->allreduce_max(shared, 2);
    stats[1] = shared[0], stats[2] = shared[1];
  }
  const double time_used = stats[1];
  // A pipeline's loss is already the whole batch's mean (see pipeline_step).
  const double loss = pipeline_ ? stats[0] : stats[0] / K;
  DL_CHECK(std::isfinite(loss), "loss became %s at step %lld: training diverged; lower the learning rate (%g) or check "
           "the data",
           std::isnan(loss) ? "NaN" : "infinite", (long long)step_ + 1, options_.schedule.at(step_, time_used));
  const double lr = options_.schedule.at(step_, time_used);
  OptimizerResult opt = dp.optimizer_step(lr);
  DL_CHECK(std::isfinite(opt.grad_norm), "gradient norm became %s at step %lld: training diverged",
           std::isnan(opt.grad_norm) ? "NaN" : "infinite", (long long)step_ + 1);
  ++step_;
  StepStats s;
  s.step = step_;
  s.loss = loss;
  s.lr = lr;
  s.grad_norm = opt.grad_norm;
  s.millis = timer.millis();
  s.tokens_per_second = static_cast<double>(per_micro) * K * dp.data_ranks() / (s.millis / 1e3);
  s.comm = dp.take_comm_time();
  if (pipeline_) {
    s.stage_bubbles = pipeline_->stage_bubbles();
    s.ideal_bubble = pipeline_->ideal_bubble();
  }
  if (time_used >= 1.0) {  // the time limit: this was the last step
    options_.steps = step_;
    stopped_by_time_limit_ = true;
  }
  if (stats[2] > 0) {
    s.stop_requested = stopped_by_request_ = true;
    options_.steps = step_;
  }
  return s;
}

void Trainer::slice_block(int m) {
  const ContextParallel& cp = engine_->context_parallel();
  if (!cp.active()) return;
  const int T = options_.seq_len, Tl = graph_.seq_len();
  const ContextLayout held(cp.size(), cp.rank(), T);
  const int64_t from_base = static_cast<int64_t>(m) * options_.batch * T;
  const int64_t to_base = static_cast<int64_t>(m) * options_.batch * Tl;
  for (int b = 0; b < options_.batch; ++b)
    for (int t = 0; t < Tl; ++t) {
      const size_t from = static_cast<size_t>(from_base + static_cast<int64_t>(b) * T + held.position(t));
      const size_t to = static_cast<size_t>(to_base + static_cast<int64_t>(b) * Tl + t);
      block_tokens_[to] = tokens_[from];
      block_targets_[to] = targets_[from];
    }
}

const int32_t* Trainer::graph_tokens(int m) {
  const int64_t at = static_cast<int64_t>(m) * options_.batch * graph_.seq_len();
  if (engine_->context_parallel().active()) return block_tokens_.data() + at;
  return tokens_.data() + at;
}

const int32_t* Trainer::graph_targets(int m) {
  const int64_t at = static_cast<int64_t>(m) * options_.batch * graph_.seq_len();
  if (engine_->context_parallel().active()) return block_targets_.data() + at;
  return targets_.data() + at;
}

void Trainer::restore(int64_t step, uint64_t sampler_position) {
  DL_CHECK(step >= 0 && step <= options_.steps, "cannot resume at step %lld of a %lld-step run", (long long)step,
           (long long)options_.steps);
  step_ = step;
  sampler_->set_position(sampler_position);
}

int64_t Trainer::global_batch() const {
  return static_cast<int64_t>(options_.batch) * engine_->data_ranks() * micro_steps();
}

uint64_t Trainer::sequences_drawn() const {
  return sampler_->position() * static_cast<uint64_t>(options_.batch) * static_cast<uint64_t>(engine_->data_ranks());
}

uint64_t Trainer::sampler_position_at(uint64_t sequences) const {
  const uint64_t per_draw = static_cast<uint64_t>(options_.batch) * static_cast<uint64_t>(engine_->data_ranks());
  DL_CHECK(sequences % per_draw == 0,
           "the checkpoint's data position (%llu sequences) is not a whole number of this run's draws of %llu "
           "sequences (batch %d x %d data-parallel ranks)",
           (unsigned long long)sequences, (unsigned long long)per_draw, options_.batch, engine_->data_ranks());
  return sequences / per_draw;
}

double Trainer::pipeline_step(const std::vector<int64_t>& valid) {
  // One normaliser for every micro-batch: the loss is the mean over the whole
  // batch, as one process computes it on all m x batch sequences.
  int64_t total = 0;
  for (int64_t v : valid) total += v;
  std::function<void()> hook;
  if (options_.before_backward) hook = [this] { options_.before_backward(step_ + 1); };
  return pipeline_->train_step(graph_tokens(0), graph_targets(0), total > 0 ? total : 1, hook);
}

double Trainer::pipeline_evaluate() {
  // A validation batch is the step's batch, m micro-batches: the same sequences
  // one process with the same global batch evaluates (the sampler numbers them
  // globally), pipelined m at a time.
  const int E = options_.eval_batches, m = options_.micro_batches;
  const int64_t per_batch = static_cast<int64_t>(options_.batch) * options_.seq_len;
  std::vector<double> sums(2 * static_cast<size_t>(E), 0.0);
  for (int i = 0; i < E; ++i) {
    for (int k = 0; k < m; ++k) {
      val_sampler_->next(tokens_.data() + k * per_batch, targets_.data() + k * per_batch);
      slice_block(k);
    }
    const std::vector<double> part = pipeline_->evaluate(graph_tokens(0), graph_targets(0), m);
    for (int k = 0; k < m; ++k) {
      sums[2 * static_cast<size_t>(i)] += part[2 * static_cast<size_t>(k)];
      sums[2 * static_cast<size_t>(i) + 1] += part[2 * static_cast<size_t>(k) + 1];
    }
  }
  engine_->allreduce_sum(sums.data(), 2 * E);
  return mean_of_batch_means(sums, E);
}

double Trainer::evaluate() {
  DL_CHECK(val_sampler_ != nullptr, "no validation data to evaluate on");
  DataParallel& dp = *engine_;
  val_sampler_->set_position(0);
  if (pipeline_) return pipeline_evaluate();
  const int E = options_.eval_batches;
  // Per batch: the summed loss and the valid targets, over all ranks; the result is
  // the mean of the batches' means, as one process with the whole batch computes it.
  std::vector<double> sums(2 * static_cast<size_t>(E));
  for (int i = 0; i < E; ++i) {
    val_sampler_->next(tokens_.data(), targets_.data());
    slice_block(0);
    ForwardArgs args;
    args.loss_normalizer = 1;  // returns the sum
    args.hooks = dp.hooks(false, false);
    sums[2 * i] = graph_.forward(dp, graph_tokens(0), graph_targets(0), args);
    sums[2 * i + 1] = static_cast<double>(graph_.valid_targets());
    dp.end_forward_only();
  }
  dp.allreduce_sum(sums.data(), 2 * E);
  return mean_of_batch_means(sums, E);
}

void Trainer::run(const std::function<void(const StepStats&)>& on_step,
                  const std::function<void(int64_t step, double val_loss)>& on_eval) {
  started_ = now_seconds();
  bool evaluated_last = false;
  if (has_validation() && on_eval) on_eval(step_, evaluate());
  while (step_ < options_.steps) {
    StepStats s = step();
    evaluated_last = false;
    if (on_step) on_step(s);
    if (has_validation() && on_eval && options_.eval_every > 0 && step_ % options_.eval_every == 0) {
      on_eval(step_, evaluate());
      evaluated_last = true;
    }
  }
  if (has_validation() && on_eval && !evaluated_last) on_eval(step_, evaluate());
}

}  // namespace distllm
