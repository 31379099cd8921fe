// Compiling a grammar spec against a vocabulary, and a bounded cache of the results.
//
// HTTP threads call GrammarCompiler::compile (thread-safe); the engine thread runs a
// GrammarMatcher per request over the shared, immutable CompiledGrammar. The one
// mutable part of a CompiledGrammar is its token-mask cache, guarded by its own lock.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "distllm/serve/structured/grammar.h"
#include "distllm/serve/structured/vocabulary.h"

namespace distllm::structured {

namespace detail {
struct FlatGrammar;
}

enum class GrammarKind { kGbnf, kRegex, kJsonSchema, kJsonObject, kChoice };
const char* grammar_kind_name(GrammarKind kind);

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kGbnf;
  std::string text;  // GBNF / regex / schema text; a JSON array of strings for kChoice

  static GrammarSpec gbnf(std::string text) { return {GrammarKind::kGbnf, std::move(text)}; }
  static GrammarSpec regex(std::string text) { return {GrammarKind::kRegex, std::move(text)}; }
  static GrammarSpec json_schema(std::string text) { return {GrammarKind::kJsonSchema, std::move(text)}; }
  static GrammarSpec json_object() { return {GrammarKind::kJsonObject, ""}; }
  static GrammarSpec choice(const std::vector<std::string>& choices);
};

// Parses a spec into a grammar (no vocabulary needed). Throws GrammarError.
Grammar grammar_from_spec(const GrammarSpec& spec);

// The tokens a parse state allows, for the top few frames of a stack (the "key").
// Tokens decided inside those frames are `accepted` (a bitmask over the vocabulary)
// or rejected; the rest, which pop below the known frames, are `uncertain` and get
// checked against the full stack at run time (XGrammar's adaptive token mask).
struct MaskCacheEntry {
  std::vector<uint32_t> accepted;   // bitmask, one bit per token
  std::vector<int32_t> uncertain;   // token ids
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab);
  ~CompiledGrammar();

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  size_t vocab_size() const { return vocab_->size(); }
  size_t mask_words() const { return (vocab_->size() + 31) / 32; }
  double compile_seconds() const { return compile_seconds_; }

  // How many frames of a stack key the mask cache.
  static constexpr int kKeyDepth = 4;

  // Internal (matcher): the flattened grammar and the mask cache.
  const detail::FlatGrammar& flat() const { return *flat_; }
  const MaskCacheEntry& mask_entry(const std::vector<uint32_t>& key) const;
  size_t mask_cache_size() const;

 private:
  friend class GrammarCompiler;
  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<detail::FlatGrammar> flat_;
  double compile_seconds_ = 0;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::unique_ptr<MaskCacheEntry>> cache_;
};

class GrammarCompiler {
 public:
  // tokens[i]: token i's bytes (empty for special tokens). `capacity`: how many
  // compiled grammars the LRU cache keeps.
  GrammarCompiler(std::vector<std::string> tokens, int32_t eos_id, size_t capacity = 64);

  // Throws GrammarError (bad spec). Cached by (kind, text).
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec);

  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }
  size_t cache_hits() const;
  size_t cache_size() const;

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0;
};

}  // namespace distllm::structured
