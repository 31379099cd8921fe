// Internal to the structured module: the grammar flattened for matching, and the
// pushdown stacks the matcher and the mask cache run on.
//
// A parse stack is a linked list of frames in an arena, each frame pointing at the
// next element to match in some alternative; frames are immutable, so stacks that
// share their lower part share its frames (a "persistent" stack) and undoing work is
// truncating the arena. The stack set is the list of top frames, always at a byte
// element: rule references and ends of alternatives are expanded eagerly.
#pragma once

#include <cstdint>
#include <vector>

#include "distllm/serve/structured/grammar.h"

namespace distllm::structured::detail {

struct FlatGrammar {
  static constexpr uint32_t kEnd = 0xFFFFFFFFu;
  static constexpr uint32_t kRuleBit = 0x80000000u;
  // Per position: kEnd, kRuleBit | rule, or an index into `sets`.
  std::vector<uint32_t> code;
  std::vector<ByteSet> sets;
  std::vector<std::vector<uint32_t>> alt_starts;  // per rule
  uint32_t root = 0;

  explicit FlatGrammar(const Grammar& g);
};

// Parent links below the bottom frame: the grammar's root is complete there, or
// (for the mask cache, which looks at the top few frames only) unknown context.
constexpr int32_t kRootBottom = -1;
constexpr int32_t kUnknownBottom = -2;

struct StackNode {
  uint32_t pos;
  int32_t parent;
};

// What expansion ran into besides byte elements.
struct Reach {
  bool root = false;     // the whole grammar completed
  bool unknown = false;  // popped below the known frames
};

class StackArena {
 public:
  explicit StackArena(const FlatGrammar& g) : g_(&g) {}

  int32_t push(uint32_t pos, int32_t parent);
  const StackNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  void truncate(size_t n) {
    nodes_.resize(n);
    stamps_.resize(n);
  }

  // The stacks a fresh parse starts with.
  void start(std::vector<int32_t>& out, Reach& reach);
  // The stacks after matching `byte` from each stack in `in`; `out` is replaced.
  void advance(const std::vector<int32_t>& in, uint8_t byte, std::vector<int32_t>& out, Reach& reach);
  // Expands position `pos` over `parent` into `out` (appending).
  void expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out, Reach& reach);

  const FlatGrammar& grammar() const { return *g_; }
  // Expansion steps since this arena was made: what a caller that runs many
  // expansions (a mask-cache entry) bounds its total work by.
  uint64_t total_work() const { return total_work_; }

 private:
  void expand_at(uint32_t pos, int32_t parent, std::vector<int32_t>& out, Reach& reach);
  void pop_to(int32_t id, std::vector<int32_t>& out, Reach& reach);

  const FlatGrammar* g_;
  std::vector<StackNode> nodes_;
  std::vector<uint32_t> stamps_;  // expansion epoch that last popped into a node
  uint32_t epoch_ = 0;
  size_t work_ = 0;
  size_t depth_ = 0;  // rule references being expanded (C++ recursion depth)
  uint64_t total_work_ = 0;
};

// Throws GrammarError when expanding some position of a rule reachable from the
// root, on its own, already exceeds the limits below: such a grammar would fail as
// soon as a request reached that position, so it is refused when compiled (a 400)
// instead. Linear in the grammar's size: an upper bound on each position's stack
// count is computed first, and only positions over the limit are expanded.
void check_expansion_limits(const FlatGrammar& g);

// Hostile or highly ambiguous grammars can multiply stacks; past these limits
// matching throws GrammarError instead of running away.
inline constexpr size_t kMaxStacks = 4096;
inline constexpr size_t kMaxExpansionWork = 1 << 20;
// Rule references entered without consuming a byte, at most (each is a frame on the
// matching thread's stack; this keeps them to well under a megabyte).
inline constexpr size_t kMaxExpansionDepth = 4096;

}  // namespace distllm::structured::detail
