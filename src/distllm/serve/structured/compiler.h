// Compiling a grammar spec against a vocabulary, and a bounded cache of the results.
//
// HTTP threads call GrammarCompiler::compile (thread-safe); the engine thread runs a
// GrammarMatcher per request over the shared, immutable CompiledGrammar. The one
// mutable part of a CompiledGrammar is its token-mask cache, guarded by its own lock.
//
// Bounds (a hostile spec must cost a fast 400, never the server's memory): a
// grammar's size (grammar.h), the parse stacks one position can make, checked when
// compiling (stack_engine.h), the work one mask-cache entry may take, the bytes
// one grammar's mask cache may hold (past them it starts over), and the bytes the
// compiler's cache of grammars may hold (least recently used ones go first). What
// a refused compilation allocated is handed back to the system.
#pragma once

#include <atomic>
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

// Matching steps one mask-cache entry may take before the grammar is refused as too
// complex (GrammarError), and the bytes one grammar's mask cache may hold.
inline constexpr uint64_t kMaxMaskEntryWork = uint64_t{1} << 26;
inline constexpr size_t kMaxMaskCacheBytes = size_t{64} << 20;
// The compiler's cache of grammars, by default.
inline constexpr size_t kDefaultGrammarCacheBytes = size_t{256} << 20;

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

  // Internal (matcher): the flattened grammar and the mask cache. An entry stays
  // valid while its holder keeps it, whatever the cache drops meanwhile. Throws
  // GrammarError when computing the entry takes over kMaxMaskEntryWork steps.
  const detail::FlatGrammar& flat() const { return *flat_; }
  std::shared_ptr<const MaskCacheEntry> mask_entry(const std::vector<uint32_t>& key) const;
  size_t mask_cache_size() const;

  // The heap this grammar holds (rules, flattened form, mask cache), estimated from
  // the containers' capacities; the shared vocabulary is not counted.
  size_t memory_bytes() const { return static_bytes_ + mask_bytes_.load(); }

 private:
  friend class GrammarCompiler;
  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<detail::FlatGrammar> flat_;
  double compile_seconds_ = 0;
  size_t static_bytes_ = 0;
  mutable std::atomic<size_t> mask_bytes_{0};
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const MaskCacheEntry>> cache_;
};

class GrammarCompiler {
 public:
  // tokens[i]: token i's bytes (empty for special tokens). The LRU cache keeps at
  // most `capacity` compiled grammars and `max_cache_bytes` of them
  // (CompiledGrammar::memory_bytes, mask caches included; the newest one is kept
  // even when it alone is larger).
  GrammarCompiler(std::vector<std::string> tokens, int32_t eos_id, size_t capacity = 64,
                  size_t max_cache_bytes = kDefaultGrammarCacheBytes);

  // Throws GrammarError (bad spec, or one over a limit). Cached by (kind, text).
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec);

  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }
  size_t cache_hits() const;
  size_t cache_size() const;
  // What the cached grammars hold now (their memory_bytes).
  size_t cache_bytes() const;

 private:
  // Drops least recently used grammars while over a bound; under mu_.
  size_t evict_locked();

  std::shared_ptr<const Vocabulary> vocab_;
  size_t capacity_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0;
};

}  // namespace distllm::structured
