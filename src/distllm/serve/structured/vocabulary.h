// A model's vocabulary as raw byte strings, with a byte trie built once per
// vocabulary and shared by every grammar compiled against it.
//
// The token mask walks this trie depth-first so that all tokens sharing a prefix
// are decided together and a subtree is skipped as soon as its prefix is rejected.
// Tokens are numbered in trie (lexicographic) order so a subtree is a contiguous
// range of `sorted_ids()`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distllm::structured {

class Vocabulary {
 public:
  // tokens[i] = the bytes token i decodes to. Empty strings mark special tokens,
  // which a grammar never allows; eos_id is allowed exactly when the grammar can end.
  Vocabulary(std::vector<std::string> tokens, int32_t eos_id);

  size_t size() const { return tokens_.size(); }
  int32_t eos_id() const { return eos_id_; }
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }

  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  struct Node {
    uint32_t first_edge = 0, num_edges = 0;
    // Tokens whose bytes end at this node: sorted_ids()[own_begin, own_end);
    // every token in the subtree: sorted_ids()[own_begin, subtree_end).
    uint32_t own_begin = 0, own_end = 0, subtree_end = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes_[0] is the root
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& sorted_ids() const { return sorted_; }

 private:
  uint32_t build(size_t begin, size_t end, size_t depth);

  std::vector<std::string> tokens_;
  int32_t eos_id_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> sorted_;
};

}  // namespace distllm::structured
