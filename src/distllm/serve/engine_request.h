// One request inside the engine (vLLM v1's Request): the scheduler's Sequence, what
// the client asked for, where its outputs go, and the state each of the engine's
// managers keeps for it. Internal to the engine and its managers; the API side
// sees GenerationRequest and OutputDelta (engine_client.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "distllm/serve/detokenizer.h"
#include "distllm/serve/engine_client.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/scheduler.h"
#include "distllm/serve/structured_output.h"

namespace distllm::serve {

struct EngineRequest {
  Sequence seq;
  GenerationRequest req;  // its sampling.seed is the one in use
  std::shared_ptr<OutputQueue> out;
  int index = 0;  // choice index within its submission

  // Output processing (output_processor.h).
  std::unique_ptr<Detokenizer> detok;
  std::vector<int32_t> min_tokens_suppressed;  // EOS (unless ignored) and stop ids
  double arrival = 0.0;
  double last_token = 0.0;
  bool scheduled = false;
  int cached_tokens = 0;

  // Structured output (structured_output.h): null without a grammar.
  std::unique_ptr<RequestGrammar> grammar;

  // What the sampler sees of this sequence for its next token.
  SequenceContext sampling_context() const {
    SequenceContext c;
    const std::span<const int32_t> all(seq.tokens);
    c.prompt = all.first(static_cast<size_t>(seq.num_prompt_tokens));
    c.generated = all.subspan(static_cast<size_t>(seq.num_prompt_tokens));
    if (seq.num_generated() < req.min_tokens) c.suppressed = min_tokens_suppressed;
    if (grammar) c.allowed = grammar->mask();
    return c;
  }
};

}  // namespace distllm::serve
