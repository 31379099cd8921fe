// Radix tree over token ids whose nodes own full KV blocks (SGLang's RadixAttention,
// at block granularity).
//
// Every edge holds a run of whole blocks: `tokens` (a multiple of block_size) and
// the physical `blocks` that hold their K/V. Children are keyed by their first
// block's tokens, so two sequences share a node exactly when they share full
// blocks of tokens from position 0. Only full blocks are cached, which is what makes
// sharing safe without copy-on-write (see model_runner.h).
//
// Ownership: the tree holds one reference on each block it stores (BlockPool's
// cached flag). A sequence that reuses a cached prefix takes its own references on
// those blocks, which pins them: eviction only frees blocks nobody but the tree
// references, taken from the tail of the least recently used leaves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "distllm/serve/block_pool.h"

namespace distllm::serve {

class PrefixCache {
 public:
  PrefixCache(BlockPool& pool, int block_size);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Blocks holding the longest cached prefix of `tokens`, in whole blocks. The
  // caller must incref the returned blocks before anything can evict them.
  std::vector<int32_t> match(std::span<const int32_t> tokens);

  // Records that blocks[i] holds the K/V of tokens[i*B, (i+1)*B) for every full
  // block i < min(tokens.size()/B, blocks.size()). Blocks for token runs already in
  // the tree are left alone (the caller keeps its duplicate); new ones are adopted
  // (the tree takes a reference). Returns the number of blocks adopted.
  int insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks);

  // Frees up to `num_blocks` blocks held only by the tree, least recently used
  // leaves first. Returns how many were freed.
  int evict(int num_blocks);

  // Drops every block only the tree holds (and forgets the rest).
  void clear();

  int block_size() const { return block_size_; }
  int num_cached_blocks() const { return num_blocks_; }
  int num_nodes() const;

  // Checks the tree's structure (keys, block counts, cached flags); throws on a
  // broken invariant. For tests.
  void check_invariants() const;

 private:
  struct Node;
  using Key = std::vector<int32_t>;

  Key key_at(std::span<const int32_t> tokens, size_t block_index) const;
  // Number of leading whole blocks of node->tokens equal to tokens[offset...].
  size_t common_blocks(const Node& node, std::span<const int32_t> tokens, size_t offset) const;
  Node* split(Node* node, size_t keep_blocks);
  void release_all(Node* node);

  BlockPool& pool_;
  int block_size_;
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;
  int num_blocks_ = 0;
};

}  // namespace distllm::serve
