// Perplexity through the inference path (InferenceModel over a paged KV cache), so
// it measures what serving computes, in any weight dtype (--dtype) and KV cache dtype (--kv-cache-dtype).
#pragma once

#include <cstdint>

#include "distllm/model/inference.h"

namespace distllm {

struct NllSum {
  double nats = 0;      // sum of -log p(token | tokens before it)
  int64_t tokens = 0;   // tokens scored
  void add(const NllSum& o) { nats += o.nats, tokens += o.tokens; }
  double perplexity() const;  // exp(nats / tokens)
};

// Scores tokens[1..n) given the tokens before each, as one sequence from position
// 0 (n <= the model's context), with a KV cache stored in `kv_dtype` (f32,
// bf16 or int8). Log-softmax in double.
NllSum sequence_nll(InferenceModel& model, const int32_t* tokens, int n, DType kv_dtype = DType::kF32);

}  // namespace distllm
