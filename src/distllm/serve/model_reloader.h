// Hot reload of `distllm serve --model DIR` (docs/serving.md "Hot reload"): loads
// what DIR holds now, checks it can replace the serving model, and installs it in a
// ReloadableEngine; on request (POST /admin/reload) or by watching DIR (--watch).
//
// A reload is refused, and the serving model kept, when DIR does not hold a complete
// model (model_watch.h), when its files cannot be loaded (corrupt or truncated:
// 422), when its tokenizer or end-of-sequence ids differ from the serving model's,
// or its vocabulary is smaller than the tokenizer (409), or when DIR changed while
// it was being loaded (409; the watcher loads the newer state next). Reloads run one
// at a time; loading runs on a transient thread (base/parallel.h), beside the engine
// that keeps serving.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distllm/model/model_weights.h"
#include "distllm/model/transformer.h"
#include "distllm/tensor/dtype.h"
#include "distllm/serve/metrics.h"
#include "distllm/serve/model_watch.h"
#include "distllm/serve/reloadable_engine.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm::serve {

struct ModelReloaderConfig {
  std::string model_dir;
  std::string tokenizer_path;  // --tokenizer (empty: the model directory's)
  // --speculative draft: every version gets its own runner over these weights.
  std::shared_ptr<const ModelWeights> draft_model;
  // --watch-checkpoints: reload from the newest checkpoint of this training
  // checkpoint directory instead of model_dir, with the serving tokenizer. The
  // loader (train/model_conversion.h's load_checkpoint_model; passed in, so serving
  // does not depend on training) reads one, verifying its checksums.
  std::string checkpoint_dir;
  std::function<std::shared_ptr<Transformer>(const std::string& checkpoint_dir)> load_checkpoint;
  DType weight_dtype = DType::kF32;  // --dtype: how every version's linears are stored
  DType kv_cache_dtype = DType::kF32;  // --kv-cache-dtype: how every version's K/V cache is stored
};

class ModelReloader {
 public:
  // `serving`: the tokenizer every version must have (the codec's); `eos_ids`: the
  // serving model's end-of-sequence ids (a reload must keep them: the API stops on
  // them); `loaded_signature`: the state of what is watched (inspect_model_dir, or
  // inspect_checkpoint_dir with checkpoint_dir) from before the serving model was read. All references must outlive this.
  ModelReloader(ReloadableEngine& engine, const Tokenizer& serving, std::vector<int32_t> eos_ids,
                ServeMetrics& metrics, ModelReloaderConfig config, std::string loaded_signature);
  ~ModelReloader();  // stops watching
  ModelReloader(const ModelReloader&) = delete;
  ModelReloader& operator=(const ModelReloader&) = delete;

  // Loads the model directory (or newest checkpoint) now and swaps it in (waits for a reload in progress
  // first). Never throws: a failure is logged, counted and answered.
  ReloadOutcome reload(const std::string& trigger);

  // Polls the model directory (or checkpoint directory) every `interval_seconds` on a background thread and
  // reloads once it holds a new complete model (ModelChangeDetector).
  void start_watching(double interval_seconds);
  void stop_watching();

 private:
  void watch_loop(double interval_seconds);
  const std::string& source() const;  // what is reloaded from: the model or checkpoint directory
  WatchedKind kind() const;
  ReloadOutcome reload_locked(const std::string& trigger);

  ReloadableEngine& engine_;
  const Tokenizer& serving_;
  std::vector<int32_t> eos_ids_;
  ServeMetrics& metrics_;
  ModelReloaderConfig config_;

  std::mutex reload_mu_;  // one reload at a time; guards detector_
  ModelChangeDetector detector_;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stop_watch_ = false;
  std::thread watcher_;
};

}  // namespace distllm::serve
