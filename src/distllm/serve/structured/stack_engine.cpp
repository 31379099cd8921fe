#include "distllm/serve/structured/stack_engine.h"

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
    for (uint32_t start : g_->alt_starts[rule]) expand_at(start, cont, out, reach);
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
  expand_at(pos, parent, out, reach);
}

void StackArena::start(std::vector<int32_t>& out, Reach& reach) {
  out.clear();
  ++epoch_;
  work_ = 0;
  for (uint32_t s : g_->alt_starts[g_->root]) expand_at(s, kRootBottom, out, reach);
}

void StackArena::advance(const std::vector<int32_t>& in, uint8_t byte, std::vector<int32_t>& out, Reach& reach) {
  out.clear();
  ++epoch_;
  work_ = 0;
  for (int32_t id : in) {
    StackNode n = nodes_[static_cast<size_t>(id)];
    if (g_->sets[g_->code[n.pos]].test(byte)) expand_at(n.pos + 1, n.parent, out, reach);
  }
}

}  // namespace distllm::structured::detail
