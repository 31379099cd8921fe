// Learning-rate schedule: linear warmup, then cosine decay to min_lr.
//   step < warmup:           lr = max_lr * (step + 1) / warmup
//   warmup <= step < total:  lr = min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2,
//                            p = (step - warmup) / (total - warmup)
//   step >= total:           lr = min_lr
// Steps are 0-based optimizer steps. kind "constant" keeps max_lr after warmup.
// With a time budget (`train --time-limit`) the decay follows the clock too:
// p = max(p, elapsed / limit), so the rate reaches min_lr when the time is up even
// when fewer steps than `total` fit into it.
#pragma once

#include <cstdint>
#include <string>

namespace distllm {

struct LrSchedule {
  std::string kind = "cosine";  // cosine | constant
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // time_fraction: the share of a time budget used so far (0 without one).
  double at(int64_t step, double time_fraction = 0) const;
  void validate() const;
};

}  // namespace distllm
