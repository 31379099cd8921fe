#include <gtest/gtest.h>

#include <numeric>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/serve/block_pool.h"
#include "distllm/serve/kv_cache_manager.h"
#include "distllm/serve/prefix_cache.h"

namespace distllm::serve {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(BlockPool, AllocateFreeAndCounts) {
  BlockPool pool(3);
  EXPECT_EQ(pool.num_free(), 3);
  int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.num_active(), 3);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  pool.incref(a);
  pool.decref(a);
  EXPECT_EQ(pool.num_free(), 0);
  pool.decref(a);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(), a);
  // A cached block the sequence lets go of stays allocated but idle.
  pool.mark_cached(b);
  pool.decref(b);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.num_active(), 2);
  pool.incref(b);  // a new sequence reuses it
  EXPECT_EQ(pool.num_evictable(), 0);
  EXPECT_EQ(pool.num_active(), 3);
  pool.decref(b);
  pool.unmark_cached(b);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.num_cached(), 0);
}

TEST(BlockPool, RejectsMisuse) {
  EXPECT_THROW(BlockPool(0), Error);
  BlockPool pool(2);
  EXPECT_THROW(pool.decref(0), Error);   // free block
  EXPECT_THROW(pool.incref(0), Error);   // free block cannot gain owners
  EXPECT_THROW(pool.decref(5), Error);   // out of range
}

TEST(PrefixCache, MatchesWholeBlocksOnly) {
  BlockPool pool(16);
  PrefixCache cache(pool, 4);
  auto tokens = iota_tokens(10);  // 2 full blocks + 2 tokens
  std::vector<int32_t> blocks{pool.allocate(), pool.allocate(), pool.allocate()};
  EXPECT_EQ(cache.insert(tokens, blocks), 2);
  EXPECT_EQ(cache.num_cached_blocks(), 2);
  EXPECT_TRUE(pool.is_cached(blocks[0]));
  EXPECT_FALSE(pool.is_cached(blocks[2]));
  EXPECT_EQ(cache.match(tokens), (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(cache.match(iota_tokens(7)), (std::vector<int32_t>{blocks[0]}));
  EXPECT_TRUE(cache.match(iota_tokens(3)).empty());
  auto other = iota_tokens(8);
  other[5] = 99;  // differs in block 1
  EXPECT_EQ(cache.match(other), (std::vector<int32_t>{blocks[0]}));
  other[0] = 99;
  EXPECT_TRUE(cache.match(other).empty());
  cache.check_invariants();
}

TEST(PrefixCache, SplitsEdgesAtDivergence) {
  BlockPool pool(32);
  PrefixCache cache(pool, 2);
  std::vector<int32_t> a{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> ab{pool.allocate(), pool.allocate(), pool.allocate(), pool.allocate()};
  cache.insert(a, ab);
  EXPECT_EQ(cache.num_nodes(), 1);
  std::vector<int32_t> b{1, 2, 3, 4, 9, 9, 10, 10};
  std::vector<int32_t> bb{ab[0], ab[1], pool.allocate(), pool.allocate()};  // shares 2 blocks
  EXPECT_EQ(cache.insert(b, bb), 2);
  EXPECT_EQ(cache.num_nodes(), 3);  // [1 2 3 4] -> {[5..8], [9 9 10 10]}
  EXPECT_EQ(cache.match(a), ab);
  EXPECT_EQ(cache.match(b), bb);
  // A duplicate physical block for an already-cached run is not adopted.
  int32_t dup = pool.allocate();
  EXPECT_EQ(cache.insert(std::vector<int32_t>{1, 2}, std::vector<int32_t>{dup}), 0);
  EXPECT_FALSE(pool.is_cached(dup));
  cache.check_invariants();
}

TEST(PrefixCache, EvictsLeastRecentlyUsedUnreferencedTails) {
  BlockPool pool(8);
  PrefixCache cache(pool, 1);
  std::vector<int32_t> x{10, 11, 12}, y{20, 21};
  std::vector<int32_t> xb{pool.allocate(), pool.allocate(), pool.allocate()};
  std::vector<int32_t> yb{pool.allocate(), pool.allocate()};
  cache.insert(x, xb);
  cache.insert(y, yb);
  for (int32_t b : xb) pool.decref(b);  // sequences done: blocks held by the tree only
  for (int32_t b : yb) pool.decref(b);
  EXPECT_EQ(pool.num_evictable(), 5);
  cache.match(x);  // x is now more recent than y
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_EQ(cache.match(y), (std::vector<int32_t>{yb[0]}));  // y's tail went first
  cache.match(x);
  // Pin x's first two blocks as a running sequence would.
  pool.incref(xb[0]);
  pool.incref(xb[1]);
  EXPECT_EQ(cache.evict(10), 2);  // y[0] and x[2]; the pinned prefix stays
  EXPECT_EQ(cache.match(x), (std::vector<int32_t>{xb[0], xb[1]}));
  EXPECT_EQ(pool.num_free(), 3 + 3);
  cache.check_invariants();
  pool.decref(xb[0]);
  pool.decref(xb[1]);
  cache.clear();
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(KvCacheManager, AllocatesAllOrNothing) {
  KvCacheManager kv(4, 16, false);
  EXPECT_TRUE(kv.allocate_slots(1, 17));  // 2 blocks
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_TRUE(kv.allocate_slots(1, 32));  // still 2
  EXPECT_EQ(kv.num_free_blocks(), 2);
  EXPECT_FALSE(kv.allocate_slots(2, 49));  // needs 4
  EXPECT_FALSE(kv.has_sequence(2));
  EXPECT_EQ(kv.num_free_blocks(), 2);
  EXPECT_TRUE(kv.allocate_slots(2, 32));
  EXPECT_DOUBLE_EQ(kv.usage(), 1.0);
  kv.free(1);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.5);
  kv.check_invariants();
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 4);
}

TEST(KvCacheManager, ReusesPrefixAndNeverTheLastToken) {
  KvCacheManager kv(16, 4, true);
  auto prompt = iota_tokens(12);
  ASSERT_TRUE(kv.allocate_slots(1, 12));
  kv.cache_computed(1, prompt, 12);
  EXPECT_EQ(kv.num_cached_blocks(), 3);
  // Same prompt: the last block cannot be reused because its last token must run.
  EXPECT_EQ(kv.acquire_cached_prefix(2, prompt), 8);
  EXPECT_EQ(kv.block_table(2), std::vector<int32_t>(kv.block_table(1).begin(), kv.block_table(1).begin() + 2));
  ASSERT_TRUE(kv.allocate_slots(2, 12));
  EXPECT_NE(kv.block_table(2)[2], kv.block_table(1)[2]);
  kv.record_prefix_query(11, 8);
  // Longer prompt sharing all 3 blocks.
  auto longer = iota_tokens(14);
  EXPECT_EQ(kv.acquire_cached_prefix(3, longer), 12);
  kv.record_prefix_query(13, 12);
  kv.record_prefix_query(5, 0);
  EXPECT_EQ(kv.prefix_stats().query_tokens, 29);
  EXPECT_EQ(kv.prefix_stats().hit_tokens, 20);
  EXPECT_EQ(kv.prefix_stats().query_requests, 3);
  EXPECT_EQ(kv.prefix_stats().hit_requests, 2);
  kv.check_invariants();
  kv.free(1);
  kv.free(2);
  kv.free(3);
  kv.check_invariants();
  EXPECT_EQ(kv.num_active_blocks(), 0);
  EXPECT_EQ(kv.num_free_blocks() + kv.num_cached_blocks(), 16);
}

TEST(KvCacheManager, EvictsCachedBlocksWhenShort) {
  KvCacheManager kv(4, 2, true);
  auto a = iota_tokens(8);
  ASSERT_TRUE(kv.allocate_slots(1, 8));
  kv.cache_computed(1, a, 8);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_EQ(kv.num_available_blocks(), 4);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.0);
  // A different sequence needs 3 blocks: the cache gives up its LRU tail.
  ASSERT_TRUE(kv.allocate_slots(2, 6));
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  EXPECT_EQ(kv.acquire_cached_prefix(3, a), 2);
  kv.check_invariants();
  // Pinned by sequence 3 now: nothing left to evict.
  EXPECT_FALSE(kv.allocate_slots(4, 4));
  kv.check_invariants();
}

// Blocks wholly before the next query's window go back to the pool (to the prefix
// cache's evictable set once offered to it); the table keeps kReleasedKvBlock.
TEST(KvCacheManager, SlidingWindowReleasesBlocksBeforeTheWindow) {
  for (bool prefix_cache : {false, true}) {
    SCOPED_TRACE(prefix_cache ? "prefix cache" : "no prefix cache");
    KvCacheManager kv(20, 4, prefix_cache);
    kv.set_sliding_window(6);
    std::vector<int32_t> tokens(30);
    for (int i = 0; i < 30; ++i) tokens[static_cast<size_t>(i)] = i;
    ASSERT_TRUE(kv.allocate_slots(1, 30));  // 8 blocks
    EXPECT_EQ(kv.release_outside_window(1, 4), 0);  // the query at 4 sees keys 0..4
    kv.cache_computed(1, tokens, 30);
    // The query at 30 sees keys 25..30: blocks 0..5 (keys 0..23) are behind it.
    EXPECT_EQ(kv.release_outside_window(1, 30), 6);
    EXPECT_EQ(kv.release_outside_window(1, 30), 0);
    const std::vector<int32_t>& table = kv.block_table(1);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(table[static_cast<size_t>(i)], kReleasedKvBlock);
    EXPECT_GE(table[6], 0);
    EXPECT_EQ(kv.num_active_blocks(), 2);
    EXPECT_EQ(kv.num_available_blocks(), 18);
    kv.check_invariants();
    // It grows on; the new full blocks are offered below the cached path.
    tokens.resize(40, 7);
    ASSERT_TRUE(kv.allocate_slots(1, 40));
    kv.cache_computed(1, tokens, 40);
    EXPECT_EQ(kv.release_outside_window(1, 40), 2);
    kv.check_invariants();
    // Another sequence with the same tokens finds the whole prefix cached.
    EXPECT_EQ(kv.acquire_cached_prefix(2, tokens), prefix_cache ? 36 : 0);
    kv.free(1);
    kv.free(2);
    kv.check_invariants();
    EXPECT_EQ(kv.num_active_blocks(), 0);
  }
}

TEST(KvCacheManager, RandomWorkloadKeepsInvariants) {
  for (int window : {0, 7}) {
  SCOPED_TRACE(::testing::Message() << "sliding window " << window);
  const int block = 4;
  KvCacheManager kv(40, block, true);
  kv.set_sliding_window(window);
  CounterRng rng(7);
  struct Seq {
    uint64_t id;
    std::vector<int32_t> tokens;
    int64_t computed;
  };
  std::vector<Seq> live;
  uint64_t next_id = 1;
  int hits = 0;
  for (int step = 0; step < 3000; ++step) {
    int op = static_cast<int>(rng.below(10));
    if (op < 3 || live.empty()) {
      // New sequence from a small set of shared prefixes.
      Seq s{next_id++, {}, 0};
      int prefix = static_cast<int>(rng.below(3));
      int len = 1 + static_cast<int>(rng.below(30));
      for (int i = 0; i < len; ++i) s.tokens.push_back(i < 12 ? prefix * 100 + i : static_cast<int32_t>(rng.below(50)));
      s.computed = kv.acquire_cached_prefix(s.id, s.tokens);
      hits += s.computed > 0 ? 1 : 0;
      ASSERT_EQ(s.computed % block, 0);
      ASSERT_LT(s.computed, static_cast<int64_t>(s.tokens.size()));
      if (kv.allocate_slots(s.id, static_cast<int64_t>(s.tokens.size()))) {
        s.computed = static_cast<int64_t>(s.tokens.size());
        kv.cache_computed(s.id, s.tokens, s.computed);
        kv.release_outside_window(s.id, s.computed);
        live.push_back(s);
      } else {
        kv.free(s.id);
      }
    } else if (op < 7) {
      Seq& s = live[rng.below(live.size())];
      s.tokens.push_back(static_cast<int32_t>(rng.below(50)));
      if (kv.allocate_slots(s.id, static_cast<int64_t>(s.tokens.size()))) {
        s.computed = static_cast<int64_t>(s.tokens.size());
        kv.cache_computed(s.id, s.tokens, s.computed);
        kv.release_outside_window(s.id, s.computed);
      } else {
        s.tokens.pop_back();
      }
    } else {
      size_t i = rng.below(live.size());
      kv.free(live[i].id);
      live.erase(live.begin() + static_cast<long>(i));
    }
    if (step % 50 == 0) kv.check_invariants();
  }
  for (auto& s : live) kv.free(s.id);
  kv.check_invariants();
  EXPECT_GT(hits, 100);  // the workload exercised sharing
  EXPECT_EQ(kv.num_active_blocks(), 0);
  EXPECT_EQ(kv.num_free_blocks() + kv.num_cached_blocks(), 40);
  kv.reset_prefix_cache();
  EXPECT_EQ(kv.num_free_blocks(), 40);
  }
}

}  // namespace
}  // namespace distllm::serve
