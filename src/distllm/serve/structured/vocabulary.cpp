#include "distllm/serve/structured/vocabulary.h"

#include <algorithm>

#include "distllm/serve/structured/grammar.h"

namespace distllm::structured {

Vocabulary::Vocabulary(std::vector<std::string> tokens, int32_t eos_id) : tokens_(std::move(tokens)), eos_id_(eos_id) {
  if (eos_id < 0 || static_cast<size_t>(eos_id) >= tokens_.size())
    throw GrammarError(strprintf("EOS id %d is outside the vocabulary of %zu tokens", eos_id, tokens_.size()));
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].empty() && static_cast<int32_t>(i) != eos_id) sorted_.push_back(static_cast<int32_t>(i));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const auto& x = tokens_[static_cast<size_t>(a)];
    const auto& y = tokens_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  build(0, sorted_.size(), 0);
}

// sorted_[begin, end) share their first `depth` bytes; the ones of exactly that
// length sort first (a prefix sorts before its extensions).
uint32_t Vocabulary::build(size_t begin, size_t end, size_t depth) {
  uint32_t id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({});
  size_t i = begin;
  while (i < end && tokens_[static_cast<size_t>(sorted_[i])].size() == depth) ++i;
  nodes_[id].own_begin = static_cast<uint32_t>(begin);
  nodes_[id].own_end = static_cast<uint32_t>(i);
  nodes_[id].subtree_end = static_cast<uint32_t>(end);
  std::vector<Edge> children;
  while (i < end) {
    uint8_t b = static_cast<uint8_t>(tokens_[static_cast<size_t>(sorted_[i])][depth]);
    size_t j = i;
    while (j < end && static_cast<uint8_t>(tokens_[static_cast<size_t>(sorted_[j])][depth]) == b) ++j;
    children.push_back({b, build(i, j, depth + 1)});
    i = j;
  }
  nodes_[id].first_edge = static_cast<uint32_t>(edges_.size());
  nodes_[id].num_edges = static_cast<uint32_t>(children.size());
  edges_.insert(edges_.end(), children.begin(), children.end());
  return id;
}

}  // namespace distllm::structured
