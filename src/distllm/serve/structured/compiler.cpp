#include "distllm/serve/structured/compiler.h"

#include <algorithm>
#include <chrono>

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

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), flat_(std::make_unique<FlatGrammar>(grammar_)) {}

CompiledGrammar::~CompiledGrammar() = default;

const MaskCacheEntry& CompiledGrammar::mask_entry(const std::vector<uint32_t>& key) const {
  std::string k(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(uint32_t));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(k);
  if (it != cache_.end()) return *it->second;
  // Computed under the lock: concurrent requests on one grammar wait rather than
  // repeat the walk. Entries are never evicted, so references stay valid.
  auto entry = std::make_unique<MaskCacheEntry>(EntryBuilder(*flat_, *vocab_).run(key));
  return *cache_.emplace(std::move(k), std::move(entry)).first->second;
}

size_t CompiledGrammar::mask_cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

GrammarCompiler::GrammarCompiler(std::vector<std::string> tokens, int32_t eos_id, size_t capacity)
    : vocab_(std::make_shared<const Vocabulary>(std::move(tokens), eos_id)), capacity_(std::max<size_t>(capacity, 1)) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec) {
  std::string key = std::string(grammar_kind_name(spec.kind)) + '\0' + spec.text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
  }
  // Compile outside the lock so one slow grammar does not stall other requests.
  auto t0 = std::chrono::steady_clock::now();
  auto compiled = std::make_shared<CompiledGrammar>(grammar_from_spec(spec), vocab_);
  {
    // Warm the mask cache for the start state (and surface ambiguity errors now).
    GrammarMatcher m(compiled);
    std::vector<uint32_t> mask(compiled->mask_words());
    m.fill_next_token_bitmask(mask);
  }
  compiled->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // another thread won the race
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
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
