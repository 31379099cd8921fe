// Output processing: what becomes of each token the engine samples (vLLM v1's
// output processor, run on the engine thread here).
//
// For every emitted token it appends the token to the sequence, advances the
// request's grammar, detokenizes (stop strings are matched on text), decides
// whether the request is done (EOS, stop token ids, stop strings, a complete
// grammar, max_tokens, the context length; EOS, stop ids and stop strings only
// count once min_tokens were generated) and builds the OutputDelta with the
// token's text and logprobs. It records the per-token metrics (TTFT, inter-token
// latency, token counts), and at the end the final delta's usage and the finish
// counters. It never frees KV blocks or queues anything: the engine does that.
#pragma once

#include <string>

#include "distllm/serve/engine_client.h"
#include "distllm/serve/engine_request.h"
#include "distllm/serve/metrics.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/text_codec.h"

namespace distllm::serve {

class OutputProcessor {
 public:
  OutputProcessor(const TextCodec& codec, ServeMetrics& metrics, int max_model_len)
      : codec_(codec), metrics_(metrics), max_model_len_(max_model_len) {}

  // Sets up a new request's output state: its detokenizer and the tokens that
  // min_tokens holds back.
  void init_request(EngineRequest& r) const;

  struct TokenOutput {
    OutputDelta delta;                          // this token's output
    FinishReason finish = FinishReason::kNone;  // else the request ends here, `delta` last
    std::string error;                          // with kError
  };
  // One emitted token, sampled at time `now`.
  TokenOutput append_token(EngineRequest& r, const SampleResult& sample, double now);

  // The final delta of a request that ends for `reason` (`last`, when given, is the
  // final token's output, which travels with the finish), and the finish metrics.
  OutputDelta final_delta(const EngineRequest& r, FinishReason reason, const std::string& error, OutputDelta* last,
                          double now);

 private:
  const TextCodec& codec_;
  ServeMetrics& metrics_;
  int max_model_len_;
};

}  // namespace distllm::serve
