#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"

namespace distllm {
namespace {

TEST(Strings, PrintfAndSplit) {
  EXPECT_EQ(strprintf("%d-%s", 7, "x"), "7-x");
  EXPECT_EQ(strprintf("%s", ""), "");
  auto parts = split("a,,b", ',');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "b");
}

TEST(Strings, ParseSize) {
  EXPECT_EQ(parse_size("8", "x"), 8);
  EXPECT_EQ(parse_size("4k", "x"), 4096);
  EXPECT_EQ(parse_size("256M", "x"), 256ll << 20);
  EXPECT_EQ(parse_size("2G", "x"), 2ll << 30);
  EXPECT_THROW(parse_size("", "x"), Error);
  EXPECT_THROW(parse_size("12q", "x"), Error);
  EXPECT_THROW(parse_size("K", "x"), Error);
  EXPECT_THROW(parse_size("99999999999999999999", "x"), Error);
}

TEST(Error, CheckNamesTheProblem) {
  try {
    DL_CHECK(1 + 1 == 3, "n_head (%d) must divide n_embd (%d)", 3, 100);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "n_head (3) must divide n_embd (100)");
  }
}

TEST(AlignedBuffer, AlignedAndZeroed) {
  AlignedBuffer<float> b(37);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  for (float v : b) EXPECT_EQ(v, 0.0f);
  AlignedBuffer<float> moved = std::move(b);
  EXPECT_EQ(moved.size(), 37u);
  EXPECT_EQ(b.size(), 0u);
}

TEST(CounterRng, ReproducibleAndIndependentStreams) {
  CounterRng a(42, 1), b(42, 1), c(42, 2), d(43, 1);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
    EXPECT_NE(x, d.next_u64());
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 1000u);
  // Jumping to a counter reproduces the sequence from there.
  CounterRng e(42, 1);
  e.set_counter(500);
  CounterRng f(42, 1);
  for (int i = 0; i < 500; ++i) f.next_u64();
  EXPECT_EQ(e.next_u64(), f.next_u64());
}

TEST(CounterRng, NormalMoments) {
  CounterRng r(7);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  for (int i = 0; i < 10000; ++i) {
    float u = r.uniform();
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
}

TEST(Parallel, ForCoversRangeOnce) {
  int saved = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<int> hits(1001, 0);
    parallel_for(0, 1001, [&](int64_t i) { hits[i]++; });
    for (int h : hits) EXPECT_EQ(h, 1);
    std::vector<int> chunk_hits(10, 0);
    parallel_chunks(0, 10, [&](int64_t lo, int64_t hi, int) {
      for (int64_t i = lo; i < hi; ++i) chunk_hits[i]++;
    });
    for (int h : chunk_hits) EXPECT_EQ(h, 1);
  }
  set_num_threads(saved);
}

// Members of a team run at once: a barrier among them completes, every rank in
// [0, size) runs exactly once, and size never exceeds what was asked.
TEST(Parallel, TeamMembersMeetAtABarrier) {
  for (int threads : {1, 2, 3, 4}) {
    std::vector<int> ranks(static_cast<size_t>(threads), 0);
    std::atomic<int> seen_size{0}, before{0}, after_saw_all{0};
    std::optional<TeamBarrier> meet;
    parallel_team(threads, [&](int rank, int size) {
      ASSERT_LE(size, threads);
#pragma omp single
      meet.emplace(size);  // an implied barrier ends `single`: all see it built
      ranks[static_cast<size_t>(rank)]++;
      seen_size = size;
      before++;
      meet->arrive_and_wait();
      if (before.load() == size) after_saw_all++;
      meet->arrive_and_wait();  // a second phase reuses it
      before--;
      meet->arrive_and_wait();
      if (before.load() == 0) after_saw_all++;
    });
    const int size = seen_size.load();
    ASSERT_GE(size, 1);
    EXPECT_EQ(after_saw_all.load(), 2 * size);
    for (int r = 0; r < threads; ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)], r < size ? 1 : 0);
  }
  EXPECT_EQ(team_rank(), 0);
  EXPECT_EQ(team_size(), 1);
}

TEST(Parallel, TransientThreadReturnsAndRethrows) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  auto value = run_on_transient_thread([&] {
    ran_on = std::this_thread::get_id();
    int64_t sum = 0;
    parallel_for(0, 100, [&](int64_t i) {
#pragma omp atomic
      sum += i;
    });
    return std::make_unique<int64_t>(sum);  // move-only results work
  });
  EXPECT_EQ(*value, 4950);
  EXPECT_NE(ran_on, caller);
  int calls = 0;
  run_on_transient_thread([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(run_on_transient_thread([]() -> int { throw_error("bad input"); }), Error);
}

}  // namespace
}  // namespace distllm
