#include "distllm/serve/request_admission.h"

#include <cmath>
#include <utility>

namespace distllm::serve {

namespace {

// Values the sampler cannot work with: non-finite numbers anywhere, and penalties
// that would turn logits infinite. (The HTTP API checks its ranges first, naming
// the field; this guards every other client of the engine.)
void check_sampling(const SamplingParams& p) {
  for (auto [name, v] : {std::pair{"temperature", p.temperature}, std::pair{"top_p", p.top_p},
                         std::pair{"min_p", p.min_p}, std::pair{"presence_penalty", p.presence_penalty},
                         std::pair{"frequency_penalty", p.frequency_penalty},
                         std::pair{"repetition_penalty", p.repetition_penalty}}) {
    if (!std::isfinite(v)) throw RequestError(400, strprintf("%s must be a finite number", name));
  }
  if (p.temperature < 0.0f) throw RequestError(400, strprintf("temperature must not be negative, got %g", p.temperature));
  if (!(p.repetition_penalty >= kMinRepetitionPenalty)) {
    throw RequestError(400, strprintf("repetition_penalty must be at least %g (smaller values make logits infinite), "
                                      "got %g",
                                      static_cast<double>(kMinRepetitionPenalty),
                                      static_cast<double>(p.repetition_penalty)));
  }
}

}  // namespace

void validate_requests(const std::vector<GenerationRequest>& requests, const AdmissionLimits& limits) {
  const int vocab = limits.vocab_size;
  const int64_t cache_tokens = static_cast<int64_t>(limits.num_blocks) * limits.block_size;
  if (static_cast<int64_t>(requests.size()) > limits.max_queued_requests) {
    throw RequestError(400, strprintf("this request asks for %zu sequences but the server queues at most %d",
                                      requests.size(), limits.max_queued_requests));
  }
  for (const auto& r : requests) {
    if (r.prompt.empty()) throw RequestError(400, "the prompt is empty: it must have at least one token");
    for (int32_t t : r.prompt) {
      if (t < 0 || t >= vocab) throw RequestError(400, strprintf("prompt token id %d is outside the vocabulary [0, %d)", t, vocab));
    }
    if (r.max_tokens < 1) throw RequestError(400, strprintf("max_tokens must be at least 1, got %d", r.max_tokens));
    int64_t prompt = static_cast<int64_t>(r.prompt.size());
    int64_t total = prompt + r.max_tokens;
    if (total > limits.max_model_len) {
      throw RequestError(400, strprintf("This model's maximum context length is %d tokens. However, you requested %lld "
                                        "tokens (%lld in the prompt, %d for the completion). Please reduce the length "
                                        "of the prompt or the completion.",
                                        limits.max_model_len, static_cast<long long>(total),
                                        static_cast<long long>(prompt), r.max_tokens));
    }
    if (total > cache_tokens) {
      throw RequestError(400, strprintf("The KV cache holds %lld tokens (%d blocks of %d) but this request needs up to "
                                        "%lld (%lld in the prompt, %d for the completion). Please reduce the length "
                                        "of the prompt or the completion, or start the server with more "
                                        "--kv-cache-memory.",
                                        static_cast<long long>(cache_tokens), limits.num_blocks, limits.block_size,
                                        static_cast<long long>(total), static_cast<long long>(prompt), r.max_tokens));
    }
    for (int32_t t : r.stop_token_ids) {
      if (t < 0 || t >= vocab) throw RequestError(400, strprintf("stop token id %d is outside the vocabulary [0, %d)", t, vocab));
    }
    for (const auto& s : r.stop) {
      if (s.empty()) throw RequestError(400, "stop strings must not be empty");
    }
    for (const auto& [t, bias] : r.sampling.logit_bias) {
      if (t < 0 || t >= vocab) throw RequestError(400, strprintf("logit_bias token id %d is outside the vocabulary [0, %d)", t, vocab));
      if (!std::isfinite(bias)) throw RequestError(400, strprintf("logit_bias for token %d is not a finite number", t));
    }
    check_sampling(r.sampling);
    if (r.min_tokens < 0 || r.min_tokens > r.max_tokens) {
      throw RequestError(400, strprintf("min_tokens must be between 0 and max_tokens (%d), got %d", r.max_tokens, r.min_tokens));
    }
  }
}

}  // namespace distllm::serve
