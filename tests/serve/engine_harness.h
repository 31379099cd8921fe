// What the engine tests share: a choice's collected output, reading an OutputQueue
// until every choice finished, and a tiny random model of either family.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "distllm/base/timer.h"
#include "distllm/model/transformer.h"
#include "distllm/serve/engine.h"

namespace distllm::serve::testing {

struct Choice {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int deltas = 0;
};

// Reads `q` until all `n` choices finished (or the timeout passes: a failure).
inline std::vector<Choice> collect(OutputQueue& q, size_t n, double timeout = 60.0) {
  std::vector<Choice> out(n);
  size_t done = 0;
  Timer t;
  std::vector<OutputDelta> ds;
  while (done < n && t.seconds() < timeout) {
    ds.clear();
    q.pop_all(ds, 0.1);
    for (auto& d : ds) {
      Choice& c = out[static_cast<size_t>(d.index)];
      EXPECT_EQ(c.finish, FinishReason::kNone) << "delta after finish";
      c.deltas++;
      c.text += d.text;
      c.tokens.insert(c.tokens.end(), d.token_ids.begin(), d.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish != FinishReason::kNone) {
        c.finish = d.finish;
        c.error = d.error;
        c.prompt_tokens = d.prompt_tokens;
        c.completion_tokens = d.completion_tokens;
        c.cached_tokens = d.cached_tokens;
        ++done;
      }
    }
  }
  EXPECT_EQ(done, n) << "timed out";
  return out;
}

// A 2-layer random model (vocabulary 300, width 32, GQA 2:1 for Llama).
inline std::shared_ptr<Transformer> tiny_model(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 300;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = family == ModelFamily::kLlama || family == ModelFamily::kMistral ? 2 : 4;
  if (family == ModelFamily::kMistral) c.sliding_window = 6;  // shorter than every request
  c.n_embd = 32;
  c.max_position = 128;
  c.tie_embeddings = family == ModelFamily::kGpt2;
  c.normalize();
  auto m = std::make_shared<Transformer>(c);
  m->init_weights(11);
  return m;
}

}  // namespace distllm::serve::testing
