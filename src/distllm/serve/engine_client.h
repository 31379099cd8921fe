// What the HTTP API speaks with whatever generates: the requests it submits, the
// outputs it reads back, the errors it is refused with, and the EngineClient
// interface itself. The local Engine (engine.h) implements it; a reloadable or a
// tensor-parallel engine, or a remote replica behind a router, can look the same.
// This header holds no engine internals, so the API layer can include it alone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/structured/compiler.h"
#include "distllm/serve/text_codec.h"

namespace distllm::serve {

// A request the engine refuses, with the HTTP status the API should answer.
class RequestError : public Error {
 public:
  RequestError(int status, const std::string& message) : Error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// One sequence to generate (one choice of an API request).
struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;            // seed ignored: see `seed`
  std::optional<uint64_t> seed;       // none: the engine draws one
  int max_tokens = 16;
  std::vector<std::string> stop;      // stop strings (matched on text)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // EOS and stop_token_ids cannot be sampled, and stop strings do not match, before
  // this many tokens were generated (vLLM's min_tokens).
  int min_tokens = 0;
  bool include_stop_str_in_output = false;  // the matched stop string ends the text
  // Structured output: every sampled token must fit this grammar (compiled against
  // the codec's vocabulary); the request stops when only EOS could follow.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

// What one choice produced since its previous delta.
struct OutputDelta {
  int index = 0;  // choice index within the submission
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // for tokens whose text is part of the output
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError
  // Filled on the final delta.
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

// Outputs of every choice of one submission, from the engine thread to a handler.
class OutputQueue {
 public:
  void push(OutputDelta delta);
  // Waits up to `timeout_seconds` for outputs and moves all pending ones into
  // `out` (appending). Returns false if nothing arrived.
  bool pop_all(std::vector<OutputDelta>& out, double timeout_seconds);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OutputDelta> pending_;
};

struct EngineStats {
  int num_blocks = 0;
  int free_blocks = 0;
  int cached_blocks = 0;
  int active_blocks = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t requests = 0;  // in the engine (waiting, running, or not yet taken in)
  int64_t steps = 0;
  int64_t preemptions = 0;
  int max_batch_seqs = 0;
  // Most requests running + waiting at once, as the scheduler held them (for the
  // admission-bound tests: it is counted apart from the admission counter).
  int64_t peak_running_plus_waiting = 0;
};

// What the HTTP API needs from whatever generates. Request ids are only meaningful
// to the client that submitted them.
class EngineClient {
 public:
  virtual ~EngineClient() = default;
  virtual std::vector<uint64_t> submit(std::vector<GenerationRequest> requests, std::shared_ptr<OutputQueue> out) = 0;
  virtual void abort(const std::vector<uint64_t>& ids) = 0;
  virtual void abort_all(const std::string& reason) = 0;
  virtual bool alive() const = 0;
  virtual int max_model_len() const = 0;
  virtual int max_completion_tokens(int prompt_len) const = 0;
  // Requests it holds at most (running + queued); more get 429.
  virtual int max_in_flight() const = 0;
  virtual const TextCodec& codec() const = 0;
  virtual EngineStats stats() const = 0;
  virtual bool wait_idle(double timeout_seconds) = 0;
  // OpenAI's system_fingerprint for a response to request `id`: which model
  // version answered (a hot reload changes it). "" when there is only one.
  virtual std::string fingerprint(uint64_t /*id*/) const { return ""; }
};

}  // namespace distllm::serve
