// An EngineClient whose model can be replaced while it serves (hot reload,
// docs/serving.md "Hot reload").
//
// It owns one Engine per model version. install() builds an Engine over a new
// runner, starts it and makes it take every later submit; the previous engine
// keeps running the requests it holds (on the old weights) until they finish, then
// a background thread stops it and frees it with its runner and weights. Until
// then both engines, and both KV caches, exist.
//
// Request ids stay unique across versions: version v's engine hands out ids from
// v << kVersionShift, so an id names the engine that runs it and abort() reaches
// it there, on whichever version. Every version shares one codec (a reload must
// keep the tokenizer: model_reloader.h checks it) and one ServeMetrics (each engine
// reports as its own source).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "distllm/serve/engine.h"

namespace distllm::serve {

// What a reload request got (model_reloader.h; the HTTP answer of POST /admin/reload).
struct ReloadOutcome {
  int status = 200;      // 200 reloaded; 409 refused (another tokenizer, changed while loading); 422 not loadable
  std::string message;   // what happened, for people
  std::string code;      // machine-readable reason when not 200
  int64_t version = 0;   // the version serving afterwards
  double seconds = 0.0;  // how long the reload took
};

class ReloadableEngine : public EngineClient {
 public:
  static constexpr int kVersionShift = 40;  // 2^40 request ids per version, 2^24 versions

  // `codec` and `metrics` must outlive this. Nothing serves until install().
  ReloadableEngine(const TextCodec& codec, EngineConfig config, ServeMetrics& metrics);
  ~ReloadableEngine() override;
  ReloadableEngine(const ReloadableEngine&) = delete;
  ReloadableEngine& operator=(const ReloadableEngine&) = delete;

  // Builds an engine over `runner` (allocating its KV cache: parallel work, so call
  // it on a transient thread, base/parallel.h), starts it and swaps it in; returns
  // its version (1 for the first). `keep` is freed with the runner (the weights
  // it reads). Throws (nothing changes then) when the engine cannot be built.
  // `draft_runner`: for --speculative draft, owned by this version like `runner`.
  int64_t install(std::shared_ptr<ModelRunner> runner, std::shared_ptr<const void> keep = nullptr,
                  std::shared_ptr<ModelRunner> draft_runner = nullptr);

  // Stops every engine (requests still in them end unanswered: call after the
  // HTTP server stopped).
  void stop();

  int64_t version() const;
  // "distllm-v3": the model version that runs request `id`.
  std::string fingerprint(uint64_t id) const override;
  // Engines still finishing requests of earlier versions.
  int retiring() const;
  // The serving engine (tests); nullptr before install().
  std::shared_ptr<Engine> current() const;

  // EngineClient: submits go to the newest engine; aborts to the engine that holds
  // the id; stats add up over every engine (so an old engine's last requests count
  // as in flight, and the graceful drain waits for them).
  std::vector<uint64_t> submit(std::vector<GenerationRequest> requests, std::shared_ptr<OutputQueue> out) override;
  void abort(const std::vector<uint64_t>& ids) override;
  void abort_all(const std::string& reason) override;
  bool alive() const override;
  int max_model_len() const override;
  int max_completion_tokens(int prompt_len) const override;
  int max_in_flight() const override;
  const TextCodec& codec() const override { return codec_; }
  EngineStats stats() const override;
  bool wait_idle(double timeout_seconds) override;

 private:
  struct Version {
    int64_t number = 0;
    std::shared_ptr<const void> keep;
    std::shared_ptr<ModelRunner> runner;
    std::shared_ptr<ModelRunner> draft_runner;
    std::shared_ptr<Engine> engine;  // declared last: stopped and freed first
  };

  std::vector<std::shared_ptr<Version>> all_versions() const;
  void reap();  // the retirer thread

  const TextCodec& codec_;
  EngineConfig config_;
  ServeMetrics& metrics_;

  mutable std::shared_mutex mu_;  // exclusive: swapping in and retiring; shared: the rest
  std::shared_ptr<Version> current_;
  std::vector<std::shared_ptr<Version>> retiring_;
  int64_t next_version_ = 1;

  std::mutex reap_mu_;
  std::condition_variable reap_cv_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace distllm::serve
