#include "distllm/serve/structured/stack_engine.h"

#include <algorithm>

namespace distllm::structured::detail {

FlatGrammar::FlatGrammar(const Grammar& g) : root(g.root) {
  alt_starts.resize(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (auto& seq : g.rules[r].alternatives) {
      alt_starts[r].push_back(static_cast<uint32_t>(code.size()));
      for (auto& e : seq) {
        if (e.kind == Element::Kind::kRule) {
          code.push_back(kRuleBit | e.rule);
        } else {
          // Share identical sets (a literal's bytes, a class used in many places).
          size_t i = 0;
          while (i < sets.size() && !(sets[i] == e.bytes) && i < 64) ++i;
          if (i == sets.size() || !(sets[i] == e.bytes)) {
            i = sets.size();
            sets.push_back(e.bytes);
          }
          code.push_back(static_cast<uint32_t>(i));
        }
      }
      code.push_back(kEnd);
    }
  }
}

int32_t StackArena::push(uint32_t pos, int32_t parent) {
  nodes_.push_back({pos, parent});
  stamps_.push_back(0);
  return static_cast<int32_t>(nodes_.size() - 1);
}

void StackArena::pop_to(int32_t id, std::vector<int32_t>& out, Reach& reach) {
  if (stamps_[static_cast<size_t>(id)] == epoch_) return;
  stamps_[static_cast<size_t>(id)] = epoch_;
  StackNode n = nodes_[static_cast<size_t>(id)];
  expand_at(n.pos, n.parent, out, reach);
}

void StackArena::expand_at(uint32_t pos, int32_t parent, std::vector<int32_t>& out, Reach& reach) {
  if (++work_ > kMaxExpansionWork)
    throw GrammarError("grammar is too ambiguous to match (too many parse states at one position)");
  ++total_work_;
  uint32_t c = g_->code[pos];
  if (c == FlatGrammar::kEnd) {
    if (parent == kRootBottom)
      reach.root = true;
    else if (parent == kUnknownBottom)
      reach.unknown = true;
    else
      pop_to(parent, out, reach);
    return;
  }
  if (c & FlatGrammar::kRuleBit) {
    uint32_t rule = c & ~FlatGrammar::kRuleBit;
    // A reference that ends its alternative is a tail call: it returns straight to
    // our parent, so right recursion (repetition) does not deepen the stack.
    int32_t cont = g_->code[pos + 1] == FlatGrammar::kEnd ? parent : push(pos + 1, parent);
    // Each nested reference is a C++ frame here: bound them before the thread's
    // stack is (a chain of 30,000 optional properties nests 30,000 rules).
    if (++depth_ > kMaxExpansionDepth) {
      depth_ = 0;
      throw GrammarError(strprintf("grammar is too deeply nested to match (over %zu rules entered without "
                                   "consuming a byte)",
                                   kMaxExpansionDepth));
    }
    for (uint32_t start : g_->alt_starts[rule]) expand_at(start, cont, out, reach);
    --depth_;
    return;
  }
  for (int32_t id : out) {
    const StackNode& n = nodes_[static_cast<size_t>(id)];
    if (n.pos == pos && n.parent == parent) return;
  }
  if (out.size() >= kMaxStacks)
    throw GrammarError("grammar is too ambiguous to match (over 4096 parse stacks)");
  out.push_back(push(pos, parent));
}

void StackArena::expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out, Reach& reach) {
  ++epoch_;
  work_ = 0;
  depth_ = 0;
  expand_at(pos, parent, out, reach);
}

void StackArena::start(std::vector<int32_t>& out, Reach& reach) {
  out.clear();
  ++epoch_;
  work_ = 0;
  depth_ = 0;
  for (uint32_t s : g_->alt_starts[g_->root]) expand_at(s, kRootBottom, out, reach);
}

void StackArena::advance(const std::vector<int32_t>& in, uint8_t byte, std::vector<int32_t>& out, Reach& reach) {
  out.clear();
  ++epoch_;
  work_ = 0;
  depth_ = 0;
  for (int32_t id : in) {
    StackNode n = nodes_[static_cast<size_t>(id)];
    if (g_->sets[g_->code[n.pos]].test(byte)) expand_at(n.pos + 1, n.parent, out, reach);
  }
}

namespace {

// The rules reachable from the root.
std::vector<char> reachable_rules(const FlatGrammar& g) {
  std::vector<char> seen(g.alt_starts.size(), 0);
  std::vector<uint32_t> work{g.root};
  seen[g.root] = 1;
  while (!work.empty()) {
    uint32_t r = work.back();
    work.pop_back();
    for (uint32_t start : g.alt_starts[r]) {
      for (uint32_t pos = start; g.code[pos] != FlatGrammar::kEnd; ++pos) {
        uint32_t c = g.code[pos];
        if (!(c & FlatGrammar::kRuleBit)) continue;
        uint32_t t = c & ~FlatGrammar::kRuleBit;
        if (!seen[t]) {
          seen[t] = 1;
          work.push_back(t);
        }
      }
    }
  }
  return seen;
}

}  // namespace

void check_expansion_limits(const FlatGrammar& g) {
  const size_t n = g.code.size();
  const uint32_t cap = static_cast<uint32_t>(kMaxStacks) + 1;  // bounds saturate here
  // rule_nullable: the rule can match the empty string (a worklist: an alternative
  // is nullable once all its elements are references to nullable rules).
  const size_t num_rules = g.alt_starts.size();
  std::vector<char> rule_nullable(num_rules, 0);
  {
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(num_rules);  // (rule, alternative)
    std::vector<std::vector<uint32_t>> missing(num_rules);
    std::vector<uint32_t> work;
    for (uint32_t r = 0; r < num_rules; ++r) {
      missing[r].assign(g.alt_starts[r].size(), 0);
      for (uint32_t a = 0; a < g.alt_starts[r].size(); ++a) {
        for (uint32_t pos = g.alt_starts[r][a]; g.code[pos] != FlatGrammar::kEnd; ++pos) {
          uint32_t c = g.code[pos];
          if (!(c & FlatGrammar::kRuleBit)) {
            missing[r][a] = UINT32_MAX;  // a byte: never empty
            break;
          }
          ++missing[r][a];
          users[c & ~FlatGrammar::kRuleBit].push_back({r, a});
        }
        if (missing[r][a] == 0 && !rule_nullable[r]) rule_nullable[r] = 1, work.push_back(r);
      }
    }
    while (!work.empty()) {
      uint32_t t = work.back();
      work.pop_back();
      for (auto [r, a] : users[t])
        if (missing[r][a] != UINT32_MAX && --missing[r][a] == 0 && !rule_nullable[r]) rule_nullable[r] = 1, work.push_back(r);
    }
  }
  // Upper bounds, per position, on what expand(pos, unknown bottom) does: fan[pos]
  // stacks made (a byte element: 1; an end: 0; a reference: its alternatives'
  // starts, plus what follows it when the rule can match empty) and deep[pos] rules
  // entered at once (a reference: 1 + the deepest alternative, plus what follows
  // when the rule can match empty), both saturating at `cap`. Computed with an
  // explicit stack (chains of references can be long); the grammar has no left
  // recursion, so the dependencies form no cycle (one is taken as `cap`).
  const uint32_t cap_deep = static_cast<uint32_t>(kMaxExpansionDepth) + 1;
  enum : uint8_t { kUnset, kOnStack, kDone };
  std::vector<uint8_t> state(n, kUnset);
  std::vector<uint32_t> fan(n, 0), deep(n, 0);
  std::vector<uint32_t> todo;
  auto compute = [&](uint32_t pos) {
    todo.push_back(pos);
    while (!todo.empty()) {
      const uint32_t p = todo.back();
      const uint32_t c = g.code[p];
      if (state[p] == kDone) {
        todo.pop_back();
        continue;
      }
      if (!(c & FlatGrammar::kRuleBit) || c == FlatGrammar::kEnd) {
        fan[p] = c == FlatGrammar::kEnd ? 0 : 1;
        state[p] = kDone;
        todo.pop_back();
        continue;
      }
      const uint32_t rule = c & ~FlatGrammar::kRuleBit;
      const bool cont = rule_nullable[rule] && g.code[p + 1] != FlatGrammar::kEnd;
      if (state[p] == kUnset) {  // first visit: compute what it needs first
        state[p] = kOnStack;
        bool ready = true;
        auto need = [&](uint32_t q) {
          if (state[q] == kUnset) ready = false, todo.push_back(q);
        };
        for (uint32_t start : g.alt_starts[rule]) need(start);
        if (cont) need(p + 1);
        if (!ready) continue;
      }
      uint64_t f = 0, d = 0;
      auto fan_of = [&](uint32_t q) -> uint64_t { return state[q] == kDone ? fan[q] : cap; };
      auto deep_of = [&](uint32_t q) -> uint64_t { return state[q] == kDone ? deep[q] : cap_deep; };
      for (uint32_t start : g.alt_starts[rule]) f += fan_of(start), d = std::max(d, deep_of(start));
      d += 1;
      if (cont) f += fan_of(p + 1), d += deep_of(p + 1);
      fan[p] = static_cast<uint32_t>(std::min<uint64_t>(f, cap));
      deep[p] = static_cast<uint32_t>(std::min<uint64_t>(d, cap_deep));
      state[p] = kDone;
      todo.pop_back();
    }
  };
  // Expand, for real, each position of a reachable rule whose bounds are over a
  // limit (a bound can overcount: stacks that coincide are kept once). A few such
  // expansions at most; past them the rest is left to the matcher, which fails only
  // the request that gets there.
  const std::vector<char> reachable = reachable_rules(g);
  StackArena arena(g);
  std::vector<int32_t> out;
  int expansions = 0;
  constexpr int kMaxExpansions = 16;
  for (uint32_t r = 0; r < g.alt_starts.size() && expansions < kMaxExpansions; ++r) {
    if (!reachable[r]) continue;
    for (uint32_t start : g.alt_starts[r]) {
      for (uint32_t pos = start;; ++pos) {
        compute(pos);
        if ((fan[pos] >= cap || deep[pos] >= cap_deep) && expansions < kMaxExpansions) {
          ++expansions;
          Reach reach;
          arena.expand(pos, kUnknownBottom, out, reach);  // throws past a limit
          arena.truncate(0);
        }
        if (g.code[pos] == FlatGrammar::kEnd) break;
      }
    }
  }
}

}  // namespace distllm::structured::detail
