// Saving without stopping training: the rank's state is copied into host buffers
// (the only stall), then a background thread writes and publishes the checkpoint
// while training goes on. A new save first waits for the previous one.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/checkpoint/store.h"

namespace distllm::checkpoint {

struct SaveResult {
  int64_t step = -1;
  std::string dir;    // empty when it failed
  std::string error;  // why it failed
  // Saved, but `latest` could not be replaced (store.h's Published).
  std::string latest_error;
  bool latest_kept = false;
  double copy_s = 0, write_s = 0;
};

class AsyncSaver {
 public:
  explicit AsyncSaver(CheckpointStore& store);
  ~AsyncSaver();  // waits for a save in flight

  // Copies `shard` (the stall), then saves on the background thread. Every rank of
  // the store's group must call it for the same steps. Returns the copy time.
  double save(const SaveRequest& request, const std::vector<ParamSpan>& layout, const ShardData& shard);
  // Waits for the save in flight (if any) and returns its outcome (step -1 if none).
  SaveResult wait();
  // The outcome of a finished save not yet collected (step -1 if none or still running).
  SaveResult poll();
  bool busy() const { return thread_.joinable(); }

 private:
  CheckpointStore& store_;
  std::thread thread_;
  std::vector<AlignedBuffer<float>> copies_;
  SaveResult result_;
  bool done_ = false;
  std::atomic<bool> finished_{false};
};

}  // namespace distllm::checkpoint
