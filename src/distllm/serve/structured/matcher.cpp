#include "distllm/serve/structured/matcher.h"

namespace distllm::structured {

using detail::Reach;

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), arena_(grammar_->flat()) {
  reset();
}

void GrammarMatcher::reset() {
  arena_.truncate(0);
  history_.clear();
  State s;
  Reach reach;
  arena_.start(s.stacks, reach);
  s.accept = reach.root;
  s.arena_size = arena_.size();
  history_.push_back(std::move(s));
}

bool GrammarMatcher::advance_bytes(std::string_view bytes, State& next) {
  cur_ = state().stacks;
  bool accept = state().accept;
  for (unsigned char b : bytes) {
    Reach reach;
    arena_.advance(cur_, b, next_, reach);
    if (next_.empty() && !reach.root) return false;
    accept = reach.root;
    std::swap(cur_, next_);
  }
  next.stacks = cur_;
  next.accept = accept;
  next.arena_size = arena_.size();
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (is_terminated()) return false;
  size_t mark = arena_.size();
  State next;
  if (!advance_bytes(bytes, next)) {
    arena_.truncate(mark);
    return false;
  }
  history_.push_back(std::move(next));
  return true;
}

bool GrammarMatcher::accept_token(int32_t token) {
  const Vocabulary& v = grammar_->vocab();
  if (token < 0 || static_cast<size_t>(token) >= v.size() || is_terminated()) return false;
  if (token == v.eos_id()) {
    if (!can_terminate()) return false;
    State s;
    s.accept = true;
    s.terminated = true;
    s.arena_size = arena_.size();
    history_.push_back(std::move(s));
    return true;
  }
  const std::string& bytes = v.token(token);
  if (bytes.empty()) return false;
  return accept_bytes(bytes);
}

void GrammarMatcher::rollback(size_t n) {
  DL_CHECK(n <= num_steps(), "grammar rollback of %zu steps, but only %zu were taken", n, num_steps());
  history_.resize(history_.size() - n);
  arena_.truncate(state().arena_size);
}

ByteSet GrammarMatcher::next_bytes() const {
  ByteSet s;
  const auto& g = grammar_->flat();
  for (int32_t id : state().stacks) s |= g.sets[g.code[arena_.node(id).pos]];
  return s;
}

bool GrammarMatcher::token_fits(int32_t stack, const std::string& bytes) {
  size_t mark = arena_.size();
  cur_.assign(1, stack);
  bool ok = true;
  for (size_t i = 0; i < bytes.size(); ++i) {
    Reach reach;
    arena_.advance(cur_, static_cast<uint8_t>(bytes[i]), next_, reach);
    if (next_.empty()) {
      ok = i + 1 == bytes.size() && reach.root;
      break;
    }
    std::swap(cur_, next_);
  }
  arena_.truncate(mark);
  return ok;
}

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> mask) {
  DL_CHECK(mask.size() >= mask_words(), "token bitmask has %zu words, the vocabulary needs %zu", mask.size(),
           mask_words());
  std::fill(mask.begin(), mask.end(), 0u);
  if (is_terminated()) return;
  const Vocabulary& v = grammar_->vocab();
  // Copy: token_fits reuses scratch vectors, not the state.
  std::vector<int32_t> stacks = state().stacks;
  for (int32_t id : stacks) {
    key_.clear();
    int32_t n = id;
    for (int d = 0; d < CompiledGrammar::kKeyDepth && n >= 0; ++d) {
      key_.push_back(arena_.node(n).pos);
      n = arena_.node(n).parent;
    }
    if (n == detail::kRootBottom) key_.push_back(detail::FlatGrammar::kEnd);
    const std::shared_ptr<const MaskCacheEntry> entry = grammar_->mask_entry(key_);
    const MaskCacheEntry& e = *entry;
    for (size_t w = 0; w < e.accepted.size(); ++w) mask[w] |= e.accepted[w];
    for (int32_t t : e.uncertain) {
      uint32_t u = static_cast<uint32_t>(t);
      if ((mask[u >> 5] >> (u & 31)) & 1) continue;
      if (token_fits(id, v.token(t))) mask[u >> 5] |= 1u << (u & 31);
    }
  }
  if (can_terminate()) {
    uint32_t eos = static_cast<uint32_t>(v.eos_id());
    mask[eos >> 5] |= 1u << (eos & 31);
  }
}

}  // namespace distllm::structured
