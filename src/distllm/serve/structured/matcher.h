// Matching generated tokens against a compiled grammar, one request at a time.
//
// A pushdown matcher in the manner of llama.cpp's grammars: the parse state is a
// set of stacks (persistent, sharing frames), advanced one byte at a time. Each
// accepted token (or byte string) is one step in a history, so the last N steps can
// be undone (speculative decoding rejects draft tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "distllm/serve/structured/compiler.h"
#include "distllm/serve/structured/stack_engine.h"

namespace distllm::structured {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by the token's bytes; EOS is accepted when the grammar can end (and
  // terminates the matcher). Returns false, changing nothing, if not allowed.
  bool accept_token(int32_t token);
  // Advances by raw bytes as one step (tests, prompts that prefill output).
  bool accept_bytes(std::string_view bytes);

  // mask: mask_words() words; bit (i % 32) of word i / 32 set = token i allowed.
  void fill_next_token_bitmask(std::span<uint32_t> mask);

  // The root rule is complete here (EOS allowed).
  bool can_terminate() const { return state().accept; }
  // Only EOS can follow (the grammar is complete and nothing can extend it).
  bool only_eos() const { return state().stacks.empty() && state().accept; }
  // EOS was accepted.
  bool is_terminated() const { return state().terminated; }
  // Bytes that could come next.
  ByteSet next_bytes() const;

  // Undoes the last n accepted steps (tokens or byte strings).
  void rollback(size_t n);
  size_t num_steps() const { return history_.size() - 1; }
  void reset();

  const CompiledGrammar& grammar() const { return *grammar_; }
  size_t mask_words() const { return grammar_->mask_words(); }

 private:
  struct State {
    std::vector<int32_t> stacks;
    bool accept = false;
    bool terminated = false;
    size_t arena_size = 0;
  };
  const State& state() const { return history_.back(); }
  bool advance_bytes(std::string_view bytes, State& next);
  bool token_fits(int32_t stack, const std::string& bytes);

  std::shared_ptr<const CompiledGrammar> grammar_;
  detail::StackArena arena_;
  std::vector<State> history_;
  std::vector<int32_t> cur_, next_;
  std::vector<uint32_t> key_;
};

}  // namespace distllm::structured
