#include "distllm/serve/structured_output.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm::serve {

RequestGrammar::RequestGrammar(std::shared_ptr<const structured::CompiledGrammar> grammar, int vocab_size)
    : matcher_(grammar) {
  const size_t words = (static_cast<size_t>(vocab_size) + 31) / 32;
  mask_.assign(std::max(words, grammar->mask_words()), 0);
}

void RequestGrammar::fill_mask() { matcher_.fill_next_token_bitmask(mask_); }

void DraftGrammarScope::follow(int32_t token) {
  if (!grammar_) return;
  DL_CHECK(grammar_->accept(token), "internal error: an accepted draft token does not fit the grammar");
  ++steps_;
}

}  // namespace distllm::serve
