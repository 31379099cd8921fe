// A loss-curve picture (SVG) of a training run: train and validation loss against
// the optimizer step, with the tokens seen on the top axis, so a user can look at a
// run instead of reading its log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distllm {

struct LossPoint {
  int64_t step = 0;
  double tokens = 0;  // tokens trained on when the loss was measured
  double loss = 0;
};

struct LossCurve {
  std::string title;
  std::vector<LossPoint> train, val;
};

std::string loss_curve_svg(const LossCurve& curve);

// Reads a `--metrics-file` (one JSON object per line: "type": "step" with "loss",
// "type": "eval" with "val_loss"; both with "step" and "tokens"). Throws naming the
// line that does not parse.
LossCurve read_metrics_file(const std::string& path);

}  // namespace distllm
