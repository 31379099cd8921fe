// Request admission: the checks a submission must pass before the engine takes it
// in, so that a request that can never run is refused at once with a 400 naming
// what is wrong, instead of failing (or waiting forever) inside the engine loop.
// The engine's capacity bound (429) is counted by the Engine itself, under the lock
// that also queues the requests.
#pragma once

#include <vector>

#include "distllm/serve/engine_client.h"

namespace distllm::serve {

// What a request is checked against.
struct AdmissionLimits {
  int vocab_size = 0;           // the model's
  int max_model_len = 0;        // prompt + completion, tokens
  int num_blocks = 0;           // KV cache blocks ...
  int block_size = 0;           // ... of this many tokens
  int max_queued_requests = 0;  // most sequences one submission may ask for
};

// Throws RequestError(400) for the first request that can never run: an empty or
// out-of-vocabulary prompt, a length over the context or the whole KV cache, bad
// stop strings or ids, bad logit_bias, min_tokens outside [0, max_tokens], sampling
// numbers that are not finite or a repetition_penalty below kMinRepetitionPenalty.
void validate_requests(const std::vector<GenerationRequest>& requests, const AdmissionLimits& limits);

}  // namespace distllm::serve
