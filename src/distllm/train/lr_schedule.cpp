#include "distllm/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/error.h"

namespace distllm {

double LrSchedule::at(int64_t step, double time_fraction) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == "constant") return max_lr;
  if (step >= total_steps || time_fraction >= 1.0) return min_lr;
  double p = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  p = std::max(p, time_fraction);
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
}

void LrSchedule::validate() const {
  DL_CHECK(kind == "cosine" || kind == "constant", "lr schedule must be 'cosine' or 'constant', got '%s'",
           kind.c_str());
  DL_CHECK(max_lr > 0 && std::isfinite(max_lr), "learning rate must be positive, got %g", max_lr);
  DL_CHECK(min_lr >= 0 && min_lr <= max_lr, "min lr must be in [0, lr], got %g", min_lr);
  DL_CHECK(warmup_steps >= 0, "warmup steps must be >= 0, got %lld", (long long)warmup_steps);
  DL_CHECK(total_steps > 0, "total steps must be positive, got %lld", (long long)total_steps);
}

}  // namespace distllm
