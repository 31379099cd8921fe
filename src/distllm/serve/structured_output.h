// Structured outputs in the engine: one request's grammar state (a GrammarMatcher
// over the shared, immutable CompiledGrammar) and the allowed-token mask it gives
// the sampler.
//
// The matcher advances only by tokens emitted for good (accept). While a chunk with
// speculative drafts is verified, row i must be sampled under the mask the grammar
// has after draft[0, i): a DraftGrammarScope follows the drafts the verifier accepts
// and rolls them back when it ends, so that afterwards only the emitted tokens count.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "distllm/serve/structured/compiler.h"
#include "distllm/serve/structured/matcher.h"

namespace distllm::serve {

class RequestGrammar {
 public:
  // `vocab_size`: the model's; the mask covers it even where the grammar's
  // vocabulary (the tokenizer's) is smaller.
  RequestGrammar(std::shared_ptr<const structured::CompiledGrammar> grammar, int vocab_size);

  // Computes the allowed-token mask for the next token; mask() then returns it.
  void fill_mask();
  std::span<const uint32_t> mask() const { return mask_; }

  // Advances by an emitted (or, in a DraftGrammarScope, a followed) token. Returns
  // false, changing nothing, if the grammar does not allow it.
  bool accept(int32_t token) { return matcher_.accept_token(token); }
  // Only EOS could follow, or EOS was accepted: the output is complete.
  bool complete() const { return matcher_.only_eos() || matcher_.is_terminated(); }
  // Undoes the last n accepted tokens.
  void rollback(size_t n) { matcher_.rollback(n); }

 private:
  structured::GrammarMatcher matcher_;
  std::vector<uint32_t> mask_;  // one buffer per request: rows are sampled in parallel
};

// Follows a speculative chunk's accepted drafts on a request's grammar, and undoes
// them when it goes out of scope.
class DraftGrammarScope {
 public:
  explicit DraftGrammarScope(RequestGrammar* grammar) : grammar_(grammar) {}  // null: no grammar
  ~DraftGrammarScope() {
    if (grammar_ && steps_) grammar_->rollback(steps_);
  }
  DraftGrammarScope(const DraftGrammarScope&) = delete;
  DraftGrammarScope& operator=(const DraftGrammarScope&) = delete;

  // The verifier accepted `token` (it sampled it under the previous row's mask).
  void follow(int32_t token);

 private:
  RequestGrammar* grammar_;
  size_t steps_ = 0;
};

}  // namespace distllm::serve
