#include "distllm/serve/prefix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>

#include "distllm/base/error.h"

namespace distllm::serve {

struct PrefixCache::Node {
  std::vector<int32_t> tokens;  // blocks.size() * block_size tokens
  std::vector<int32_t> blocks;
  std::map<Key, std::unique_ptr<Node>> children;
  Node* parent = nullptr;
  uint64_t last_access = 0;
};

PrefixCache::PrefixCache(BlockPool& pool, int block_size)
    : pool_(pool), block_size_(block_size), root_(std::make_unique<Node>()) {
  DL_CHECK(block_size > 0, "prefix cache block size must be positive, got %d", block_size);
}

PrefixCache::~PrefixCache() { clear(); }

PrefixCache::Key PrefixCache::key_at(std::span<const int32_t> tokens, size_t block_index) const {
  auto first = tokens.begin() + static_cast<std::ptrdiff_t>(block_index * block_size_);
  return Key(first, first + block_size_);
}

size_t PrefixCache::common_blocks(const Node& node, std::span<const int32_t> tokens, size_t offset) const {
  size_t b = static_cast<size_t>(block_size_);
  size_t k = 0;
  while (k < node.blocks.size() && offset + (k + 1) * b <= tokens.size() &&
         std::equal(node.tokens.begin() + static_cast<std::ptrdiff_t>(k * b),
                    node.tokens.begin() + static_cast<std::ptrdiff_t>((k + 1) * b),
                    tokens.begin() + static_cast<std::ptrdiff_t>(offset + k * b))) {
    ++k;
  }
  return k;
}

std::vector<int32_t> PrefixCache::match(std::span<const int32_t> tokens) {
  std::vector<int32_t> out;
  const size_t b = static_cast<size_t>(block_size_);
  const size_t full = tokens.size() / b;
  ++clock_;
  Node* node = root_.get();
  size_t done = 0;  // whole blocks matched so far
  while (done < full) {
    auto it = node->children.find(key_at(tokens, done));
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    size_t k = common_blocks(*child, tokens, done * b);
    child->last_access = clock_;
    out.insert(out.end(), child->blocks.begin(), child->blocks.begin() + static_cast<std::ptrdiff_t>(k));
    done += k;
    if (k < child->blocks.size()) break;
    node = child;
  }
  return out;
}

PrefixCache::Node* PrefixCache::split(Node* node, size_t keep_blocks) {
  DL_ASSERT(keep_blocks > 0 && keep_blocks < node->blocks.size());
  const size_t keep_tokens = keep_blocks * static_cast<size_t>(block_size_);
  Node* parent = node->parent;
  Key key(node->tokens.begin(), node->tokens.begin() + block_size_);
  auto mid = std::make_unique<Node>();
  mid->tokens.assign(node->tokens.begin(), node->tokens.begin() + static_cast<std::ptrdiff_t>(keep_tokens));
  mid->blocks.assign(node->blocks.begin(), node->blocks.begin() + static_cast<std::ptrdiff_t>(keep_blocks));
  mid->parent = parent;
  mid->last_access = node->last_access;
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + static_cast<std::ptrdiff_t>(keep_tokens));
  node->blocks.erase(node->blocks.begin(), node->blocks.begin() + static_cast<std::ptrdiff_t>(keep_blocks));
  std::unique_ptr<Node> owned = std::move(parent->children.at(key));
  owned->parent = mid.get();
  Key rest_key(node->tokens.begin(), node->tokens.begin() + block_size_);
  mid->children.emplace(std::move(rest_key), std::move(owned));
  Node* raw = mid.get();
  parent->children[key] = std::move(mid);
  return raw;
}

int PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks) {
  const size_t b = static_cast<size_t>(block_size_);
  const size_t n = std::min(tokens.size() / b, blocks.size());
  ++clock_;
  Node* node = root_.get();
  size_t i = 0;
  int adopted = 0;
  while (i < n) {
    Key key = key_at(tokens, i);
    auto it = node->children.find(key);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i * b),
                          tokens.begin() + static_cast<std::ptrdiff_t>(n * b));
      leaf->blocks.assign(blocks.begin() + static_cast<std::ptrdiff_t>(i), blocks.begin() + static_cast<std::ptrdiff_t>(n));
      leaf->parent = node;
      leaf->last_access = clock_;
      for (int32_t blk : leaf->blocks) {
        // A physical block sits at one position of one token path; seeing it cached
        // already would mean two paths claim the same K/V.
        DL_ASSERT(!pool_.is_cached(blk));
        pool_.mark_cached(blk);
      }
      adopted += static_cast<int>(leaf->blocks.size());
      num_blocks_ += static_cast<int>(leaf->blocks.size());
      node->children.emplace(std::move(key), std::move(leaf));
      break;
    }
    Node* child = it->second.get();
    size_t limit_tokens = n * b;  // never compare past the blocks we were given
    size_t k = common_blocks(*child, tokens.first(limit_tokens), i * b);
    DL_ASSERT(k >= 1);  // the key (first block) matched
    child->last_access = clock_;
    i += k;
    if (k < child->blocks.size()) {
      if (i == n) break;  // our run ends inside this edge: nothing new to add
      node = split(child, k);
    } else {
      node = child;
    }
  }
  return adopted;
}

int PrefixCache::evict(int num_blocks) {
  if (num_blocks <= 0) return 0;
  using Entry = std::pair<uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get() && n->children.empty()) leaves.emplace(n->last_access, n);
    for (auto& [k, c] : n->children) stack.push_back(c.get());
  }
  int freed = 0;
  while (freed < num_blocks && !leaves.empty()) {
    Node* leaf = leaves.top().second;
    leaves.pop();
    Key key(leaf->tokens.begin(), leaf->tokens.begin() + block_size_);
    // Sequences pin prefixes, so blocks only the tree holds form a tail of the run.
    while (!leaf->blocks.empty() && freed < num_blocks && pool_.ref_count(leaf->blocks.back()) == 1) {
      pool_.unmark_cached(leaf->blocks.back());
      leaf->blocks.pop_back();
      leaf->tokens.resize(leaf->blocks.size() * static_cast<size_t>(block_size_));
      --num_blocks_;
      ++freed;
    }
    if (leaf->blocks.empty()) {
      Node* parent = leaf->parent;
      parent->children.erase(key);  // destroys leaf
      if (parent != root_.get() && parent->children.empty()) leaves.emplace(parent->last_access, parent);
    }
  }
  return freed;
}

void PrefixCache::release_all(Node* node) {
  for (auto& [k, c] : node->children) release_all(c.get());
  for (int32_t blk : node->blocks) pool_.unmark_cached(blk);
  num_blocks_ -= static_cast<int>(node->blocks.size());
  node->children.clear();
}

void PrefixCache::clear() {
  // Recursion depth is the tree's depth: at most one level per cached block.
  release_all(root_.get());
}

int PrefixCache::num_nodes() const {
  int count = 0;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get()) ++count;
    for (const auto& [k, c] : n->children) stack.push_back(c.get());
  }
  return count;
}

void PrefixCache::check_invariants() const {
  std::set<int32_t> seen;
  int total = 0;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get()) {
      DL_ASSERT(!n->blocks.empty());
      DL_ASSERT(n->tokens.size() == n->blocks.size() * static_cast<size_t>(block_size_));
      for (int32_t blk : n->blocks) {
        DL_ASSERT(pool_.is_cached(blk));
        DL_ASSERT(seen.insert(blk).second);
      }
      total += static_cast<int>(n->blocks.size());
    } else {
      DL_ASSERT(n->blocks.empty());
    }
    for (const auto& [key, c] : n->children) {
      DL_ASSERT(c->parent == n);
      DL_ASSERT(std::equal(key.begin(), key.end(), c->tokens.begin()));
      stack.push_back(c.get());
    }
  }
  DL_ASSERT(total == num_blocks_);
  DL_ASSERT(total == pool_.num_cached());
}

}  // namespace distllm::serve
