// What `distllm train` shows while it runs (rank 0 only): a live progress line on a
// terminal or plain log lines otherwise, one JSON object per step and evaluation in
// --metrics-file, and a loss-curve SVG at the end.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "distllm/train/loss_plot.h"
#include "distllm/train/trainer.h"

namespace distllm {

struct RankFigures {
  double comm_busy_ms = 0, comm_exposed_ms = 0;
  int64_t peak_bytes = 0;      // MemoryStats peak (AlignedBuffer bytes)
  int64_t peak_rss_bytes = 0;  // VmHWM
};

class TrainReport {
 public:
  // progress: "auto" (a live line when stdout is a terminal), "on" or "off".
  TrainReport(bool active, int64_t total_steps, int64_t log_every, const std::string& progress,
              const std::string& metrics_file, double tokens_per_step);
  ~TrainReport();

  void run_info(const std::string& title, const std::string& details);
  void step(const StepStats& s, const std::vector<RankFigures>& ranks);
  // Bits per byte beside the losses (eval lines, the summary, "val_bpb" in the
  // metrics): TokenDataset::bits_per_byte of each split; unset or null: not shown.
  void set_bits_per_byte(std::function<double(double)> train, std::function<double(double)> val);
  void eval(int64_t step, double val_loss, const std::vector<RankFigures>& ranks);
  // A line of its own (checkpoints): ends a live progress line first.
  void note(const std::string& line);
  // Pipelines: each stage's mean bubble over the steps after the first (warm-up), as
  // a line; "" without a pipeline.
  std::string bubble_summary() const;
  // Writes the loss curve (SVG) and returns its path ("" when nothing was logged).
  std::string write_plot(const std::string& path);
  // The end of the run in two lines: why it stopped (`why`: "all 200 steps done",
  // "the --time-limit of 330 s was reached", ...), steps, tokens, time, the last
  // train and the last and best validation loss; then where its outputs are
  // (`outputs`, e.g. "model: DIR | loss curve: FILE").
  void finish(int64_t steps_done, const std::string& why, const std::string& outputs);

 private:
  bool active_;
  int64_t total_, log_every_;
  bool live_ = false;
  bool line_open_ = false;
  double tokens_per_step_;
  double started_;
  FILE* metrics_ = nullptr;
  LossCurve curve_;
  std::function<double(double)> train_bpb_, val_bpb_;
  std::vector<double> bubble_sums_;  // per stage, over steps 2..
  int64_t bubble_steps_ = 0;
  double ideal_bubble_ = 0;

  void end_live_line();
};

}  // namespace distllm
