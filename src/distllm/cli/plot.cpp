// `distllm plot`: the loss curve (SVG) of a run from its --metrics-file.
#include <cstdio>

#include "distllm/base/error.h"
#include "distllm/cli/command.h"
#include "distllm/io/file_util.h"
#include "distllm/train/loss_plot.h"

namespace distllm {
namespace {

int run_plot(Args& args) {
  std::string out = args.get_string("out", "", "SVG file to write (default: METRICS.svg)");
  std::string title = args.get_string("title", "", "title (default: the run's own)");
  if (args.help_or_finish()) return 0;
  DL_CHECK(args.positional().size() == 1, "usage: distllm plot METRICS_FILE [--out FILE.svg]");
  const std::string& metrics = args.positional()[0];
  LossCurve curve = read_metrics_file(metrics);
  DL_CHECK(!curve.train.empty() || !curve.val.empty(), "%s has no step or eval records", metrics.c_str());
  if (!title.empty()) curve.title = title;
  if (out.empty()) out = metrics + ".svg";
  write_file_atomic(out, loss_curve_svg(curve));
  std::printf("%s: %zu train and %zu validation points\n", out.c_str(), curve.train.size(), curve.val.size());
  return 0;
}

DISTLLM_REGISTER_COMMAND("plot", "draw a training run's loss curve (SVG) from its --metrics-file", run_plot);

}  // namespace
}  // namespace distllm
