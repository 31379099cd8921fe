// Checkpoints of a training run (the trainer's side of src/distllm/checkpoint):
// periodic saves, synchronous or in the background, resume from the newest good
// checkpoint, and what the manifest records about the run.
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
  std::string resume;       // "", "auto" or a step directory
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
  // with no checkpoint yet). A checkpoint of another model is refused naming the field.
  int64_t resume(Trainer& trainer);
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

  checkpoint::SaveRequest request(const Trainer& trainer) const;
  std::string describe(const checkpoint::SaveResult& r);
};

}  // namespace distllm
