#include "distllm/serve/structured/compiler.h"

#include <algorithm>
#include <chrono>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <nlohmann/json.hpp>

#include "distllm/serve/structured/gbnf.h"
#include "distllm/serve/structured/json_schema_to_grammar.h"
#include "distllm/serve/structured/matcher.h"
#include "distllm/serve/structured/regex_to_grammar.h"
#include "distllm/serve/structured/stack_engine.h"

namespace distllm::structured {

using detail::FlatGrammar;
using detail::Reach;
using detail::StackArena;

const char* grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kGbnf: return "gbnf";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kChoice: return "choice";
  }
  return "?";
}

GrammarSpec GrammarSpec::choice(const std::vector<std::string>& choices) {
  return {GrammarKind::kChoice, nlohmann::json(choices).dump()};
}

Grammar grammar_from_spec(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kGbnf: return parse_gbnf(spec.text);
    case GrammarKind::kRegex: return regex_to_grammar(spec.text);
    case GrammarKind::kJsonSchema: return json_schema_to_grammar(std::string_view(spec.text));
    case GrammarKind::kJsonObject: return json_object_grammar();
    case GrammarKind::kChoice: {
      nlohmann::json list;
      try {
        list = nlohmann::json::parse(spec.text);
      } catch (const nlohmann::json::exception&) {
        throw GrammarError("guided_choice must be a JSON array of strings");
      }
      if (!list.is_array()) throw GrammarError("guided_choice must be an array of strings");
      std::vector<std::string> choices;
      for (auto& c : list) {
        if (!c.is_string()) throw GrammarError("guided_choice must be an array of strings");
        choices.push_back(c.get<std::string>());
      }
      return choice_grammar(choices);
    }
  }
  throw GrammarError("unknown grammar kind");
}

namespace {

// Computes one mask-cache entry: a depth-first walk of the vocabulary trie from the
// key's frames, pruning a subtree as soon as its prefix is rejected.
class EntryBuilder {
 public:
  EntryBuilder(const FlatGrammar& g, const Vocabulary& v) : arena_(g), vocab_(v) {}

  MaskCacheEntry run(const std::vector<uint32_t>& key) {
    entry_.accepted.assign((vocab_.size() + 31) / 32, 0);
    bool rooted = !key.empty() && key.back() == FlatGrammar::kEnd;
    size_t frames = rooted ? key.size() - 1 : key.size();
    int32_t top = rooted ? detail::kRootBottom : detail::kUnknownBottom;
    for (size_t i = frames; i-- > 0;) top = arena_.push(key[i], top);
    size_t max_len = 0;
    for (size_t i = 0; i < vocab_.size(); ++i) max_len = std::max(max_len, vocab_.token(static_cast<int32_t>(i)).size());
    sets_.assign(max_len + 2, {});
    memo_.assign(max_len + 2, {});
    accepts_.assign(max_len + 2, {});
    sets_[0] = {top};
    walk(0, 0, false);
    std::sort(entry_.uncertain.begin(), entry_.uncertain.end());
    return std::move(entry_);
  }

 private:
  void accept_range(uint32_t begin, uint32_t end) {
    const auto& ids = vocab_.sorted_ids();
    for (uint32_t i = begin; i < end; ++i) {
      uint32_t t = static_cast<uint32_t>(ids[i]);
      entry_.accepted[t >> 5] |= 1u << (t & 31);
    }
  }
  void uncertain_range(uint32_t begin, uint32_t end) {
    const auto& ids = vocab_.sorted_ids();
    entry_.uncertain.insert(entry_.uncertain.end(), ids.begin() + begin, ids.begin() + end);
  }

  // `uncertain`: some shorter prefix already popped below the known frames, so a
  // token rejected by the known frames may still fit the real stack.
  //
  // Matching byte b from a stack set depends only on which stacks accept b, not on b
  // itself, so sibling edges with the same acceptance pattern share one expansion
  // (in a JSON string, every ordinary ASCII byte leads to the same set).
  void walk(uint32_t trie_node, size_t depth, bool uncertain) {
    const auto& node = vocab_.nodes()[trie_node];
    const auto& g = arena_.grammar();
    size_t mark = arena_.size();
    auto& memo = memo_[depth];
    size_t used = 0;  // memo entries in use (kept allocated across calls)
    const bool can_memo = sets_[depth].size() <= 64;
    auto& accepts = accepts_[depth];  // each stack's byte set, looked up once
    accepts.clear();
    for (int32_t id : sets_[depth]) accepts.push_back(&g.sets[g.code[arena_.node(id).pos]]);
    for (uint32_t e = node.first_edge; e < node.first_edge + node.num_edges; ++e) {
      const auto& edge = vocab_.edges()[e];
      const auto& child = vocab_.nodes()[edge.child];
      uint64_t sig = 0;
      bool any = false;
      for (size_t i = 0; i < accepts.size(); ++i) {
        if (accepts[i]->test(edge.byte)) {
          any = true;
          if (can_memo) sig |= uint64_t{1} << i;
        }
      }
      Reach reach;
      if (!any) {
        sets_[depth + 1].clear();
      } else if (can_memo) {
        size_t k = 0;
        while (k < used && memo[k].sig != sig) ++k;
        if (k == used) {
          if (used == memo.size()) memo.emplace_back();
          ++used;
          memo[k].sig = sig;
          memo[k].reach = Reach{};
          arena_.advance(sets_[depth], edge.byte, memo[k].set, memo[k].reach);
        }
        sets_[depth + 1] = memo[k].set;
        reach = memo[k].reach;
      } else {
        arena_.advance(sets_[depth], edge.byte, sets_[depth + 1], reach);
      }
      if (arena_.total_work() > kMaxMaskEntryWork)
        throw GrammarError(strprintf("grammar is too complex: one token mask needs over %llu matching steps",
                                     static_cast<unsigned long long>(kMaxMaskEntryWork)));
      bool alive = !sets_[depth + 1].empty();
      if (alive || reach.root || reach.unknown)
        accept_range(child.own_begin, child.own_end);
      else if (uncertain)
        uncertain_range(child.own_begin, child.own_end);
      bool below = uncertain || reach.unknown;
      if (alive)
        walk(edge.child, depth + 1, below);  // truncates what it pushes
      else if (below)
        uncertain_range(child.own_end, child.subtree_end);
      if (!can_memo) arena_.truncate(mark);
    }
    arena_.truncate(mark);
  }

  struct Memo {
    uint64_t sig = 0;
    std::vector<int32_t> set;
    Reach reach;
  };
  std::vector<std::vector<Memo>> memo_;
  std::vector<std::vector<const ByteSet*>> accepts_;

  StackArena arena_;
  const Vocabulary& vocab_;
  std::vector<std::vector<int32_t>> sets_;
  MaskCacheEntry entry_;
};

}  // namespace

namespace {

size_t grammar_bytes(const Grammar& g) {
  size_t n = g.rules.capacity() * sizeof(Rule);
  for (const Rule& r : g.rules) {
    n += r.name.capacity() + r.alternatives.capacity() * sizeof(Sequence);
    for (const Sequence& s : r.alternatives) n += s.capacity() * sizeof(Element);
  }
  return n;
}

// Grammars over this size have the compiler hand its scratch back afterwards.
constexpr size_t kReleaseAfterBytes = size_t{16} << 20;

size_t flat_bytes(const FlatGrammar& f) {
  size_t n = f.code.capacity() * sizeof(uint32_t) + f.sets.capacity() * sizeof(ByteSet) +
             f.alt_starts.capacity() * sizeof(std::vector<uint32_t>);
  for (const auto& a : f.alt_starts) n += a.capacity() * sizeof(uint32_t);
  return n;
}

size_t entry_bytes(const std::string& key, const MaskCacheEntry& e) {
  constexpr size_t kNodeOverhead = 64;  // hash node, control block, allocator headers
  return key.capacity() + sizeof(MaskCacheEntry) + e.accepted.capacity() * sizeof(uint32_t) +
         e.uncertain.capacity() * sizeof(int32_t) + kNodeOverhead;
}

// Gives the heap's free pages back to the system. A compilation that is refused
// (or a grammar dropped from the cache) may have freed tens of megabytes that the
// allocator would otherwise keep for this thread's arena.
void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), flat_(std::make_unique<FlatGrammar>(grammar_)) {
  static_bytes_ = sizeof(CompiledGrammar) + grammar_bytes(grammar_) + flat_bytes(*flat_);
}

CompiledGrammar::~CompiledGrammar() = default;

std::shared_ptr<const MaskCacheEntry> CompiledGrammar::mask_entry(const std::vector<uint32_t>& key) const {
  std::string k(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(uint32_t));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(k);
  if (it != cache_.end()) return it->second;
  // Computed under the lock: concurrent requests on one grammar wait rather than
  // repeat the walk. Holders keep their entries alive (shared), so the cache may
  // start over when it grows past its bound.
  auto entry = std::make_shared<const MaskCacheEntry>(EntryBuilder(*flat_, *vocab_).run(key));
  const size_t bytes = entry_bytes(k, *entry);
  if (mask_bytes_.load() + bytes > kMaxMaskCacheBytes) {
    cache_.clear();
    mask_bytes_ = 0;
  }
  mask_bytes_ += bytes;
  return cache_.emplace(std::move(k), std::move(entry)).first->second;
}

size_t CompiledGrammar::mask_cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

GrammarCompiler::GrammarCompiler(std::vector<std::string> tokens, int32_t eos_id, size_t capacity,
                                 size_t max_cache_bytes)
    : vocab_(std::make_shared<const Vocabulary>(std::move(tokens), eos_id)),
      capacity_(std::max<size_t>(capacity, 1)),
      max_bytes_(max_cache_bytes) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec) {
  std::string key = std::string(grammar_kind_name(spec.kind)) + '\0' + spec.text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      // Mask caches grow while requests run: the byte bound is checked on hits too.
      evict_locked();
      return lru_.front().second;
    }
  }
  // Compile outside the lock so one slow grammar does not stall other requests.
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<CompiledGrammar> compiled;
  try {
    compiled = std::make_shared<CompiledGrammar>(grammar_from_spec(spec), vocab_);
    // Refuse now what would fail the first request that reached some position.
    detail::check_expansion_limits(compiled->flat());
    // Warm the mask cache for the start state (and surface ambiguity errors now).
    GrammarMatcher m(compiled);
    std::vector<uint32_t> mask(compiled->mask_words());
    m.fill_next_token_bitmask(mask);
  } catch (const GrammarError&) {
    compiled.reset();
    release_free_memory();
    throw;
  }
  compiled->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t evicted = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;  // another thread won the race
    lru_.emplace_front(key, compiled);
    index_[key] = lru_.begin();
    evicted = evict_locked();
  }
  // A large compilation freed several times its grammar's size in scratch (the
  // expression trees, the unflattened copy); a dropped grammar freed its own.
  if (evicted > 0 || compiled->memory_bytes() > kReleaseAfterBytes) release_free_memory();
  return compiled;
}

size_t GrammarCompiler::evict_locked() {
  size_t total = 0;
  for (const Entry& e : lru_) total += e.second->memory_bytes();
  size_t evicted = 0;
  while (lru_.size() > capacity_ || (total > max_bytes_ && lru_.size() > 1)) {
    total -= std::min(total, lru_.back().second->memory_bytes());
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++evicted;
  }
  return evicted;
}

size_t GrammarCompiler::cache_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const Entry& e : lru_) total += e.second->memory_bytes();
  return total;
}

size_t GrammarCompiler::cache_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

size_t GrammarCompiler::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace distllm::structured
