// BPE merge order: hand-made cases, then the fast merge loop against GPT-2's
// reference loop on random words and random (even inconsistent) merge tables.
#include "distllm/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include "distllm/base/rng.h"
#include "distllm/tokenizer/tokenizer.h"
#include "tiny_tokenizer.h"

namespace distllm {
namespace {

using test::tiny_tokenizer_json;

// Ids in tiny tokenizers: bytes are their own ids, extra tokens follow from 256.
TEST(Bpe, LowerRankMergesFirst) {
  // "abc" with merges (b c) before (a b): b+c first, then nothing joins a and bc.
  Tokenizer t1 = Tokenizer::from_json(tiny_tokenizer_json({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}).dump());
  EXPECT_EQ(t1.encode("abc"), (std::vector<int32_t>{'a', 257}));
  // The same merges in the other order give the other split.
  Tokenizer t2 = Tokenizer::from_json(tiny_tokenizer_json({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}).dump());
  EXPECT_EQ(t2.encode("abc"), (std::vector<int32_t>{256, 'c'}));
  // A later merge builds on an earlier one.
  Tokenizer t3 = Tokenizer::from_json(
      tiny_tokenizer_json({"bc", "abc"}, {{"b", "c"}, {"a", "bc"}}).dump());
  EXPECT_EQ(t3.encode("abc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(t3.encode("abcabc bc"), (std::vector<int32_t>{257, 257, ' ', 256}));
}

TEST(Bpe, EveryOccurrenceMergesLeftToRight) {
  Tokenizer t = Tokenizer::from_json(tiny_tokenizer_json({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}).dump());
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(t.encode("aaaa"), (std::vector<int32_t>{257}));
  EXPECT_EQ(t.encode("aaaaaaa"), (std::vector<int32_t>{257, 256, 'a'}));
}

TEST(Bpe, DuplicateMergeKeepsItsLastRank) {
  // (a b) is listed first and again last: it ranks after (b c), as in GPT-2's dict.
  Tokenizer t = Tokenizer::from_json(tiny_tokenizer_json({"ab", "bc"}, {{"a", "b"}, {"b", "c"}, {"a", "b"}}).dump());
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{'a', 257}));
}

// Random merge tables over a small alphabet; merged tokens get fresh ids. Ranks are
// shuffled, so a merge may build on one that ranks after it.
struct RandomMerges {
  BpeMerges table;
  int32_t alphabet;
};

RandomMerges random_merges(CounterRng& rng, int32_t alphabet, int count) {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<int32_t> merged;
  int32_t next = alphabet;
  for (int i = 0; i < count; ++i) {
    int32_t a = static_cast<int32_t>(rng.below(next));
    int32_t b = static_cast<int32_t>(rng.below(next));
    pairs.emplace_back(a, b);
    merged.push_back(next++);
  }
  for (size_t i = pairs.size(); i > 1; --i) {  // shuffle the ranks
    size_t j = rng.below(i);
    std::swap(pairs[i - 1], pairs[j]);
    std::swap(merged[i - 1], merged[j]);
  }
  RandomMerges r;
  r.table.build(pairs, merged);
  r.alphabet = alphabet;
  return r;
}

TEST(Bpe, HeapLoopMatchesReferenceLoop) {
  CounterRng rng(1234);
  BpeScratch scratch;
  int words = 0;
  for (int table = 0; table < 60; ++table) {
    int32_t alphabet = 2 + static_cast<int32_t>(rng.below(5));
    RandomMerges m = random_merges(rng, alphabet, 1 + static_cast<int>(rng.below(40)));
    for (int w = 0; w < 100; ++w, ++words) {
      std::vector<int32_t> word(1 + rng.below(rng.below(4) == 0 ? 300 : 20));
      for (int32_t& s : word) s = static_cast<int32_t>(rng.below(alphabet));
      std::vector<int32_t> ref = word, heap = word, mixed = word;
      bpe_merge_reference(ref, m.table);
      bpe_merge_heap(heap, m.table, scratch);
      bpe_merge(mixed, m.table, scratch);
      ASSERT_EQ(heap, ref) << "table " << table << " word " << w;
      ASSERT_EQ(mixed, ref) << "table " << table << " word " << w;
    }
  }
  EXPECT_EQ(words, 6000);
}

TEST(Bpe, LongWordsMergeInNLogN) {
  // 200k symbols with a chain of merges a+a, aa+aa, ...: the heap loop finishes fast
  // (the reference loop would take minutes).
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<int32_t> merged;
  for (int32_t k = 0; k < 17; ++k) {
    pairs.emplace_back(k, k);
    merged.push_back(k + 1);
  }
  BpeMerges table;
  table.build(pairs, merged);
  std::vector<int32_t> word(200000, 0);
  BpeScratch scratch;
  bpe_merge(word, table, scratch);
  // 200000 = 131072 + 65536 + 2048 + 1024 + 256 + 64: one token per set bit.
  EXPECT_EQ(word, (std::vector<int32_t>{17, 16, 11, 10, 8, 6}));
}

}  // namespace
}  // namespace distllm
