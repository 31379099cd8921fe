// The serving engine's core: request lifecycle around one engine-loop thread.
//
// HTTP handlers submit requests (one per choice) and read their outputs from an
// OutputQueue; the engine thread owns everything else. Each loop iteration (a
// "step"): take in new requests and cancellations, let the scheduler pick the
// batch, have the model runner execute it, sample, and hand each token to the
// output processor, which detokenizes, checks stop conditions and builds the
// outputs. Cancelled requests are removed (and their KV blocks freed) at the start
// of the next step.
//
// One request's failure (its grammar, its sampling parameters, its output
// processing, its draft) ends that request alone, with FinishReason::kError and the
// error in its final delta; a runner failure ends the requests of that step. Only
// a failure of the shared state (KV bookkeeping, the scheduler) stops the loop.
//
// The jobs beside the core have their own rooms (after vLLM v1): the API types in
// engine_client.h, admission checks in request_admission.h, output processing in
// output_processor.h, structured outputs in structured_output.h, speculative
// decoding in speculative_decoder.h; KV export/import for prefill/decode
// disaggregation is in engine_kv_transfer.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/detokenizer.h"
#include "distllm/serve/draft_proposer.h"
#include "distllm/serve/engine_client.h"
#include "distllm/serve/engine_config.h"
#include "distllm/serve/engine_request.h"
#include "distllm/serve/kv_cache_manager.h"
#include "distllm/serve/metrics.h"
#include "distllm/serve/model_runner.h"
#include "distllm/serve/output_processor.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/scheduler.h"
#include "distllm/serve/speculative.h"
#include "distllm/serve/speculative_decoder.h"
#include "distllm/serve/structured/compiler.h"
#include "distllm/serve/text_codec.h"

namespace distllm::serve {

class Engine : public EngineClient {
 public:
  // `draft_runner`: the draft model for SpeculativeMethod::kDraft (required then,
  // ignored otherwise); it must outlive the engine. Its KV cache is allocated with
  // the target's block count and block size (on top of --kv-cache-memory).
  Engine(ModelRunner& runner, const TextCodec& codec, EngineConfig config, ServeMetrics& metrics,
         ModelRunner* draft_runner = nullptr);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();
  void stop();

  // Validates and queues the requests atomically (all or none). Throws RequestError:
  // 400 for a request that can never run (bad tokens, too long for the context or
  // the whole KV cache), 429 when running + waiting would pass max_num_seqs +
  // max_queued_requests, 503 when the engine loop is not running. Returns the request ids, in order; outputs arrive in `out`
  // with OutputDelta::index = position in `requests`.
  std::vector<uint64_t> submit(std::vector<GenerationRequest> requests, std::shared_ptr<OutputQueue> out) override;
  // Cancels requests (unknown or finished ids are ignored). Their blocks are freed
  // at the start of the next engine step.
  void abort(const std::vector<uint64_t>& ids) override;
  // Ends every request in the engine at the next step with FinishReason::kAbort and
  // this error (graceful shutdown: what is still running when the drain time is up).
  void abort_all(const std::string& reason) override;

  // The loop thread is running and has not died.
  bool alive() const override { return alive_.load(); }
  int max_model_len() const override { return max_model_len_; }
  int block_size() const { return config_.block_size; }
  int num_blocks() const { return kv_.num_blocks(); }
  // Longest completion a prompt of this length could ever get (context and cache).
  int max_completion_tokens(int prompt_len) const override;
  int max_in_flight() const override { return config_.scheduler.max_num_seqs + config_.max_queued_requests; }
  const TextCodec& codec() const override { return codec_; }
  const EngineConfig& config() const { return config_; }
  // The speculative proposer (nullptr when speculation is off). For tests.
  const DraftProposer* proposer() const { return spec_.proposer(); }
  EngineStats stats() const override;
  // Blocks until no request is in the engine (or the timeout passes). For tests.
  bool wait_idle(double timeout_seconds) override;

  // KV transfer (prefill/decode disaggregation, kv_transfer/). Both run on the
  // engine thread between steps while the caller waits up to `timeout_seconds`;
  // they throw RequestError(503) when the engine is not running or does not answer
  // in time, and distllm::Error when the runner cannot move blocks.
  // Copies the K/V of the longest cached prefix of `tokens` (whole blocks, at most
  // `max_blocks`): one string of runner.kv_bytes_per_block(block_size) bytes each.
  std::vector<std::string> export_cached_prefix(std::vector<int32_t> tokens, int max_blocks, double timeout_seconds);
  // Writes blocks[i] as the K/V of tokens[i*B, (i+1)*B) into free blocks and puts
  // them in the prefix cache (KvCacheManager::import_prefix), so a request with
  // this prompt then starts past them. Returns how many leading blocks of `tokens`
  // are cached afterwards (0 with the prefix cache off).
  int import_prefix(std::vector<int32_t> tokens, std::vector<std::string> blocks, double timeout_seconds);
  const ModelRunner& runner() const { return runner_; }

 private:
  struct Task;
  // Runs `fn` on the engine thread at the start of a step and waits for it
  // (rethrowing what it threw). `fn` must own what it uses: after a timeout it may
  // still run.
  void run_on_loop(std::function<void()> fn, double timeout_seconds);

  void loop();
  void step();
  void take_in();
  // Ends a request: frees its blocks, records metrics, pushes its final delta
  // (`last`, when given, carries the final token's output too).
  void finish(EngineRequest& r, FinishReason reason, const std::string& error = "", OutputDelta* last = nullptr);
  // Hands one chunk's verified samples to the output processor; finishes the
  // request where a token ends it.
  void apply_samples(EngineRequest& r, const ScheduledChunk& c, const VerifyResult& v, double now);
  // Ends every request of a step whose model run failed.
  void fail_batch(const SchedulerOutput& out, const std::string& error);
  void publish_stats();

  ModelRunner& runner_;
  const TextCodec& codec_;
  EngineConfig config_;
  ServeMetrics& metrics_;
  KvCacheManager kv_;
  int max_model_len_;
  Scheduler scheduler_;
  SpeculativeDecoder spec_;
  OutputProcessor output_;

  // Engine-thread state.
  std::unordered_map<uint64_t, std::unique_ptr<EngineRequest>> requests_;
  int64_t steps_ = 0;
  int max_batch_ = 0;
  int64_t peak_in_scheduler_ = 0;

  // Shared with submitters, under mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<std::unique_ptr<EngineRequest>> incoming_;
  std::vector<uint64_t> aborts_;
  std::optional<std::string> abort_all_reason_;
  std::vector<std::shared_ptr<Task>> tasks_;
  // Requests admitted by submit() and not yet finished (incoming, waiting or
  // running). Admission checks and bumps it under one lock, so a burst of
  // submitters cannot all see room for themselves.
  int64_t admitted_ = 0;
  EngineStats stats_;
  bool stop_ = false;

  std::atomic<bool> alive_{false};
  std::atomic<uint64_t> next_id_;
  std::thread thread_;
};

}  // namespace distllm::serve
