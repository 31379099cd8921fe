#include "distllm/tokenizer/bpe.h"

#include <algorithm>

namespace distllm {

void BpeMerges::build(const std::vector<std::pair<int32_t, int32_t>>& pairs, const std::vector<int32_t>& merged) {
  size_t cap = 16;
  while (cap < pairs.size() * 2) cap *= 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
  for (size_t r = 0; r < pairs.size(); ++r) {
    uint64_t key = pack(pairs[r].first, pairs[r].second);
    size_t i = hash(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++count_;
    slots_[i].key = key;
    slots_[i].merge = Merge{static_cast<uint32_t>(r), merged[r]};
  }
}

namespace {

// GPT-2's loop, keeping the rank of every adjacent pair so that a round only looks
// up the pairs its merges created. A rank names one pair, so "the pair at i has the
// lowest rank" is "the pair at i is (first, second)".
void merge_by_scanning(std::vector<int32_t>& word, const BpeMerges& merges, BpeScratch& s) {
  constexpr uint32_t kNone = ~0u;
  size_t n = word.size();
  auto& rank = s.rank;
  auto& merged = s.merged;
  auto& fresh = s.fresh;
  rank.resize(n);
  merged.resize(n);
  fresh.resize(n);
  auto look_up = [&](size_t i) {
    const BpeMerges::Merge* m = merges.find(word[i], word[i + 1]);
    rank[i] = m ? m->rank : kNone;
    merged[i] = m ? m->merged : 0;
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  while (n > 1) {
    uint32_t best = kNone;
    int32_t best_id = 0;
    for (size_t i = 0; i + 1 < n; ++i)
      if (rank[i] < best) best = rank[i], best_id = merged[i];
    if (best == kNone) break;
    // Merge every occurrence left to right, in place; pairs untouched by a merge keep
    // their rank (they move left with their symbols).
    size_t out = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && rank[i] == best) {
        word[out] = best_id;
        fresh[out] = 1;
        i += 2;
      } else {
        word[out] = word[i];
        rank[out] = rank[i];
        merged[out] = merged[i];
        fresh[out] = 0;
        i += 1;
      }
      ++out;
    }
    n = out;
    for (size_t i = 0; i + 1 < n; ++i)
      if (fresh[i] || fresh[i + 1]) look_up(i);
  }
  word.resize(n);
}

// Min-heap order on (rank, position).
struct EntryAfter {
  bool operator()(const BpeScratch::Entry& a, const BpeScratch::Entry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

void bpe_merge_reference(std::vector<int32_t>& word, const BpeMerges& merges) {
  std::vector<int32_t> next_word;
  while (word.size() > 1) {
    // The lowest-ranked adjacent pair.
    const BpeMerges::Merge* best = nullptr;
    int32_t first = 0, second = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const BpeMerges::Merge* m = merges.find(word[i], word[i + 1]);
      if (m != nullptr && (best == nullptr || m->rank < best->rank)) {
        best = m;
        first = word[i];
        second = word[i + 1];
      }
    }
    if (best == nullptr) break;
    // Merge every occurrence, scanning left to right.
    next_word.clear();
    for (size_t i = 0; i < word.size();) {
      if (word[i] == first && i + 1 < word.size() && word[i + 1] == second) {
        next_word.push_back(best->merged);
        i += 2;
      } else {
        next_word.push_back(word[i]);
        i += 1;
      }
    }
    word.swap(next_word);
  }
}

// Each heap entry names a pair by the position of its left symbol; entries go stale
// when either symbol is merged away and are checked when popped. All entries of the
// lowest rank are taken out together and applied left to right before anything new
// is considered: that is the reference's "merge every occurrence" step, and it keeps
// the two identical even when a merge creates a pair of lower rank (possible with a
// hand-made merges list).
void bpe_merge_heap(std::vector<int32_t>& word, const BpeMerges& merges, BpeScratch& s) {
  const int32_t n = static_cast<int32_t>(word.size());
  if (n < 2) return;
  s.prev.resize(n);
  s.next.resize(n);
  s.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  EntryAfter after;
  auto push = [&](int32_t pos) {
    int32_t nx = s.next[pos];
    if (nx < 0) return;
    if (const BpeMerges::Merge* m = merges.find(word[pos], word[nx])) {
      s.heap.push_back({m->rank, static_cast<uint32_t>(pos)});
      std::push_heap(s.heap.begin(), s.heap.end(), after);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  constexpr int32_t kDead = -2;  // marks merged-away symbols in `prev`
  while (!s.heap.empty()) {
    uint32_t rank = s.heap.front().rank;
    s.batch.clear();
    while (!s.heap.empty() && s.heap.front().rank == rank) {
      std::pop_heap(s.heap.begin(), s.heap.end(), after);
      s.batch.push_back(s.heap.back());
      s.heap.pop_back();
    }
    for (const BpeScratch::Entry& e : s.batch) {  // ascending positions
      int32_t pos = static_cast<int32_t>(e.pos);
      if (s.prev[pos] == kDead) continue;
      int32_t nx = s.next[pos];
      if (nx < 0) continue;
      const BpeMerges::Merge* m = merges.find(word[pos], word[nx]);
      if (m == nullptr || m->rank != rank) continue;  // stale: the pair has changed
      word[pos] = m->merged;
      int32_t after_nx = s.next[nx];
      s.next[pos] = after_nx;
      if (after_nx >= 0) s.prev[after_nx] = pos;
      s.prev[nx] = kDead;
      if (s.prev[pos] >= 0) push(s.prev[pos]);
      push(pos);
    }
  }
  int32_t out = 0;
  for (int32_t i = 0; i >= 0; i = s.next[i]) word[out++] = word[i];
  word.resize(out);
}

void bpe_merge(std::vector<int32_t>& word, const BpeMerges& merges, BpeScratch& scratch) {
  // Most pieces are a few bytes long; for them scanning beats heap bookkeeping.
  if (word.size() <= 16) {
    merge_by_scanning(word, merges, scratch);
  } else {
    bpe_merge_heap(word, merges, scratch);
  }
}

}  // namespace distllm
