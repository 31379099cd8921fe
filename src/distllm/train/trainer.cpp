#include "distllm/train/trainer.h"

#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"

namespace distllm {

void TrainOptions::validate() const {
  DL_CHECK(batch > 0, "batch size must be positive, got %d", batch);
  DL_CHECK(seq_len > 0, "sequence length must be positive, got %d", seq_len);
  DL_CHECK(grad_accum > 0, "gradient accumulation steps must be positive, got %d", grad_accum);
  DL_CHECK(steps > 0, "steps must be positive, got %lld", (long long)steps);
  DL_CHECK(eval_every >= 0, "eval interval must be >= 0, got %lld", (long long)eval_every);
  DL_CHECK(eval_batches > 0, "eval batches must be positive, got %d", eval_batches);
  schedule.validate();
  adamw.validate();
}

Trainer::Trainer(Transformer& model, const TokenDataset& train, const TokenDataset* val, TrainOptions options)
    : model_(model),
      options_(std::move(options)),
      graph_(model.config(), options_.batch, options_.seq_len),
      optimizer_(model.layout(), options_.adamw) {
  if (options_.schedule.total_steps <= 1) options_.schedule.total_steps = options_.steps;
  options_.validate();
  train.check_tokens_below(model.config().vocab_size);
  sampler_ = std::make_unique<BatchSampler>(train, options_.batch, options_.seq_len, options_.seed);
  if (val != nullptr) {
    val->check_tokens_below(model.config().vocab_size);
    val_sampler_ = std::make_unique<BatchSampler>(*val, options_.batch, options_.seq_len, options_.seed + 1);
  }
  size_t n = static_cast<size_t>(options_.batch) * options_.seq_len;
  tokens_.resize(n);
  targets_.resize(n);
  model_.zero_grad();
}

StepStats Trainer::step() {
  Timer timer;
  model_.zero_grad();
  double loss_sum = 0;
  float scale = 1.0f / static_cast<float>(options_.grad_accum);
  for (int micro = 0; micro < options_.grad_accum; ++micro) {
    sampler_->next(tokens_.data(), targets_.data());
    float loss = graph_.forward(model_, tokens_.data(), targets_.data(), true, scale);
    DL_CHECK(std::isfinite(loss), "loss became %s at step %lld (micro-batch %d): training diverged; lower the "
             "learning rate (%g) or check the data",
             std::isnan(loss) ? "NaN" : "infinite", (long long)step_ + 1, micro, options_.schedule.at(step_));
    graph_.backward(model_);
    loss_sum += loss;
  }
  double lr = options_.schedule.at(step_);
  double norm = optimizer_.step(model_.params(), model_.grads(), lr);
  DL_CHECK(std::isfinite(norm), "gradient norm became %s at step %lld: training diverged",
           std::isnan(norm) ? "NaN" : "infinite", (long long)step_ + 1);
  ++step_;
  StepStats s;
  s.step = step_;
  s.loss = loss_sum / options_.grad_accum;
  s.lr = lr;
  s.grad_norm = norm;
  s.millis = timer.millis();
  s.tokens_per_second =
      static_cast<double>(options_.batch) * options_.seq_len * options_.grad_accum / (s.millis / 1e3);
  return s;
}

double Trainer::evaluate() {
  DL_CHECK(val_sampler_ != nullptr, "no validation data to evaluate on");
  val_sampler_->set_position(0);
  double sum = 0;
  for (int i = 0; i < options_.eval_batches; ++i) {
    val_sampler_->next(tokens_.data(), targets_.data());
    sum += graph_.forward(model_, tokens_.data(), targets_.data(), false);
  }
  return sum / options_.eval_batches;
}

void Trainer::run(const std::function<void(const StepStats&)>& on_step,
                  const std::function<void(int64_t step, double val_loss)>& on_eval) {
  Timer total;
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
    if (options_.time_limit_seconds > 0 && total.seconds() > options_.time_limit_seconds) break;
  }
  if (has_validation() && on_eval && !evaluated_last) on_eval(step_, evaluate());
}

}  // namespace distllm
