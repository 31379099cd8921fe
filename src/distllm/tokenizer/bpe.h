// The BPE merge step: given a word as a sequence of token ids, repeatedly merge the
// adjacent pair with the lowest merge rank, exactly as GPT-2's reference code does:
// pick the lowest-ranked pair present, merge every occurrence of it left to right
// (non-overlapping), and repeat until no adjacent pair has a rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace distllm {

// (left id, right id) -> (rank, merged id), in an open-addressing hash table.
class BpeMerges {
 public:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };

  BpeMerges() = default;
  // Later entries for the same pair replace earlier ones (as in GPT-2's dict).
  void build(const std::vector<std::pair<int32_t, int32_t>>& pairs, const std::vector<int32_t>& merged);

  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

// Reusable buffers for bpe_merge (one per thread).
struct BpeScratch {
  std::vector<int32_t> word;  // the word being encoded (bpe_model.h)
  struct Entry {
    uint32_t rank;
    uint32_t pos;
  };
  std::vector<Entry> heap;
  std::vector<Entry> batch;
  std::vector<int32_t> prev, next;
  std::vector<uint32_t> rank;  // the scanning loop's per-pair state
  std::vector<int32_t> merged;
  std::vector<uint8_t> fresh;
};

// Merges `word` in place: O(n log n) with a heap of candidate pairs; short words take a
// scan that keeps each pair's rank, which is faster for them. Both follow the
// reference order exactly.
void bpe_merge(std::vector<int32_t>& word, const BpeMerges& merges, BpeScratch& scratch);

// The reference loop transcribed from GPT-2's encoder.py (O(n^2)); tests compare
// bpe_merge against it.
void bpe_merge_reference(std::vector<int32_t>& word, const BpeMerges& merges);

// The heap version alone, whatever the word's length (for tests).
void bpe_merge_heap(std::vector<int32_t>& word, const BpeMerges& merges, BpeScratch& scratch);

}  // namespace distllm
