// Checkpoints of a training run (the trainer's side of src/distllm/checkpoint):
// periodic saves, synchronous or in the background, resume from the checkpoint
// `latest` names (or the newest good one of this run), and what the manifest
// records about the run: its id and settings (run_identity.h).
//
// A checkpoint folder belongs to one run. A run never starts at step 0 over
// checkpoints it was not asked to replace, never continues another run's (or
// another model's) checkpoint unless asked, and its retention removes only its own
// checkpoints (the run id it took at step 0, kept when it resumes).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "distllm/checkpoint/async_saver.h"
#include "distllm/checkpoint/store.h"
#include "distllm/train/data_parallel.h"
#include "distllm/train/trainer.h"

namespace distllm {

struct CheckpointOptions {
  std::string dir;          // empty: no checkpoints
  int64_t every = 0;        // save every N steps (0: only at the end and on a stop signal)
  // "": start at step 0 (refused when `dir` holds checkpoints, unless start_over);
  // "auto": the checkpoint `latest` names if this run may continue it, else the
  // newest one it may; step 0 when `dir` holds none; refused when it holds some but
  // none this run may continue, unless start_over. Or a step directory.
  std::string resume;
  bool start_over = false;        // --start-over: step 0 even over checkpoints in `dir`
  bool resume_other_run = false;  // --resume-other-run: continue a checkpoint of other settings
  checkpoint::Retention retention;
  bool async = true;        // write in the background (the stall is the copy)
};

class TrainCheckpointer {
 public:
  // Collective over the engine's world (creates the checkpoint's own communicator).
  // `world`: every rank that writes (all ranks of a --mesh; default: dp's world).
  TrainCheckpointer(DataParallel& dp, CheckpointOptions options, nlohmann::json training_flags,
                    comm::ProcessGroupPtr world = nullptr);
  ~TrainCheckpointer();

  bool enabled() const { return !options_.dir.empty(); }
  // Collective. Restores engine and trainer from the checkpoint options.resume
  // names; returns the step resumed at, or -1 when starting fresh (resume "auto"
  // with no checkpoint yet, or start_over). Throws distllm::Error, on every rank,
  // naming each checkpoint and why when it may not start or resume (see
  // CheckpointOptions::resume); a checkpoint of another model is refused naming the
  // field, one of another run naming the first setting that differs.
  int64_t resume(Trainer& trainer);
  // How resume() chose its checkpoint, for the log ("named by `latest`", ...); "" if
  // it did not resume or was given the step directory.
  const std::string& resumed_how() const { return resumed_how_; }
  const std::string& run_id() const { return run_id_; }
  // After each step: saves when due (or when `force`). Returns a line for the log
  // (a save started, finished or failed), or "".
  std::string after_step(Trainer& trainer, bool force);
  // Waits for a background save; returns its log line ("" if none).
  std::string finish();

  double last_stall_s() const { return last_stall_s_; }
  // Whether the most recent save that completed failed (disk full, I/O error), and
  // the step of the newest checkpoint this run published (-1: none).
  bool last_save_failed() const { return last_save_failed_; }
  int64_t newest_saved_step() const { return newest_saved_step_; }

 private:
  DataParallel& dp_;
  CheckpointOptions options_;
  nlohmann::json training_;
  comm::ProcessGroupPtr group_;
  std::unique_ptr<checkpoint::CheckpointStore> store_;
  std::unique_ptr<checkpoint::AsyncSaver> saver_;
  int64_t last_saved_ = -1;
  double last_stall_s_ = 0;
  bool last_save_failed_ = false;
  int64_t newest_saved_step_ = -1;
  std::string run_id_;
  std::string resumed_how_;

  bool lead() const { return !group_ || group_->rank() == 0; }
  checkpoint::SaveRequest request(const Trainer& trainer) const;
  // Throws unless this run may start at step 0 in the folder (see resume).
  void check_fresh_start() const;
  // Throws saying why this run may not continue `r` (another model, another run).
  void check_continuable(const checkpoint::CheckpointReader& r, bool explicitly_named) const;
  std::string describe(const checkpoint::SaveResult& r);
};

}  // namespace distllm
