#include <gtest/gtest.h>

#include <memory>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/serve/scheduler.h"

namespace distllm::serve {
namespace {

struct Sim {
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<int> target;  // tokens to generate per sequence
  int steps = 0;

  Sim(int blocks, int block_size, bool prefix, SchedulerConfig cfg) : kv(blocks, block_size, prefix), sched(cfg, kv) {}

  Sequence* add(std::vector<int32_t> prompt, int gen) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    s->num_prompt_tokens = static_cast<int>(prompt.size());
    s->tokens = std::move(prompt);
    sched.add(s.get());
    seqs.push_back(std::move(s));
    target.push_back(gen);
    return seqs.back().get();
  }

  // One engine step with a fake model: every sampled token is 7 + position.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    ++steps;
    for (const auto& c : out.chunks) {
      // What the runner would be handed must be consistent.
      EXPECT_EQ(c.start, c.seq->num_computed);
      EXPECT_GE(static_cast<int64_t>(kv.block_table(c.seq->id).size()) * kv.block_size(), c.start + c.num_tokens);
    }
    sched.on_step_done(out);
    for (const auto& c : out.chunks) {
      if (c.num_logits == 0) continue;
      Sequence* s = c.seq;
      s->tokens.push_back(static_cast<int32_t>(7 + s->tokens.size()));
      if (s->num_generated() >= target[s->id - 1]) sched.finish(s);
    }
    kv.check_invariants();
    return out;
  }

  int run_to_completion(int max_steps) {
    while (sched.has_work() && steps < max_steps) step();
    return steps;
  }
};

std::vector<int32_t> prompt_of(int n, int salt = 0) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(1000 * salt + i);
  return p;
}

TEST(Scheduler, ChunksLongPrefillsAndServesDecodesFirst) {
  Sim sim(64, 4, false, {.max_num_batched_tokens = 8, .max_num_seqs = 4});
  Sequence* a = sim.add(prompt_of(3), 5);
  auto out = sim.step();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].num_tokens, 3);
  EXPECT_EQ(out.chunks[0].num_logits, 1);
  Sequence* b = sim.add(prompt_of(20, 1), 2);
  out = sim.step();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq, a);  // the decode comes first
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_EQ(out.chunks[1].seq, b);
  EXPECT_EQ(out.chunks[1].num_tokens, 7);  // the rest of the budget
  EXPECT_EQ(out.chunks[1].num_logits, 0);
  EXPECT_EQ(out.num_batched_tokens, 8);
  out = sim.step();
  EXPECT_EQ(out.chunks[1].num_tokens, 7);
  EXPECT_EQ(out.chunks[1].num_logits, 0);
  out = sim.step();
  EXPECT_EQ(out.chunks[1].num_tokens, 6);  // 20 = 7 + 7 + 6
  EXPECT_EQ(out.chunks[1].num_logits, 1);
  EXPECT_EQ(b->num_generated(), 1);
  sim.run_to_completion(100);
  EXPECT_EQ(a->status, SeqStatus::kFinished);
  EXPECT_EQ(a->num_generated(), 5);
  EXPECT_EQ(b->num_generated(), 2);
  EXPECT_EQ(sim.kv.num_active_blocks(), 0);
}

TEST(Scheduler, RespectsMaxNumSeqsAndFcfs) {
  Sim sim(64, 4, false, {.max_num_batched_tokens = 64, .max_num_seqs = 2});
  for (int i = 0; i < 5; ++i) sim.add(prompt_of(2, i), 3);
  auto out = sim.step();
  EXPECT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(sim.sched.num_running(), 2u);
  EXPECT_EQ(sim.sched.num_waiting(), 3u);
  EXPECT_EQ(sim.sched.waiting().front()->id, 3u);
  std::vector<uint64_t> finish_order;
  while (sim.sched.has_work()) {
    auto o = sim.step();
    EXPECT_LE(sim.sched.num_running(), 2u);
    for (auto& c : o.chunks)
      if (c.seq->status == SeqStatus::kFinished) finish_order.push_back(c.seq->id);
  }
  EXPECT_EQ(finish_order, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST(Scheduler, PreemptsNewestByRecomputeAndResumes) {
  // 6 blocks of 4 tokens; two sequences that each grow to 20 tokens (5 blocks).
  Sim sim(6, 4, false, {.max_num_batched_tokens = 64, .max_num_seqs = 4});
  Sequence* a = sim.add(prompt_of(8, 1), 12);
  Sequence* b = sim.add(prompt_of(8, 2), 12);
  bool saw_preemption = false;
  while (sim.sched.has_work() && sim.steps < 200) {
    auto out = sim.step();
    for (Sequence* p : out.preempted) {
      saw_preemption = true;
      EXPECT_EQ(p, b);  // the newest goes
      EXPECT_EQ(sim.sched.waiting().front(), b);
      EXPECT_EQ(b->num_computed, 0);
      EXPECT_FALSE(sim.kv.has_sequence(b->id));
    }
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_GT(sim.sched.num_preemptions(), 0);
  EXPECT_EQ(a->num_generated(), 12);
  EXPECT_EQ(b->num_generated(), 12);
  // Recompute kept b's generated tokens: same deterministic stream as a's.
  for (size_t i = 8; i < b->tokens.size(); ++i) EXPECT_EQ(b->tokens[i], static_cast<int32_t>(7 + i));
  EXPECT_EQ(sim.kv.num_free_blocks(), 6);
}

TEST(Scheduler, AdmittedSequencesReusePrefixCache) {
  Sim sim(32, 4, true, {.max_num_batched_tokens = 64, .max_num_seqs = 4});
  sim.add(prompt_of(10), 1);
  sim.run_to_completion(10);
  Sequence* b = sim.add(prompt_of(10), 1);
  auto out = sim.step();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].cached_tokens, 8);
  EXPECT_EQ(out.chunks[0].start, 8);
  EXPECT_EQ(out.chunks[0].num_tokens, 2);
  EXPECT_EQ(b->status, SeqStatus::kFinished);
  EXPECT_EQ(sim.kv.prefix_stats().query_requests, 2);
  EXPECT_EQ(sim.kv.prefix_stats().hit_requests, 1);
  EXPECT_EQ(sim.kv.prefix_stats().hit_tokens, 8);
  EXPECT_EQ(sim.kv.prefix_stats().query_tokens, 18);
}

// Drafts: [newest, drafts] chunks, cut to the budget, dropped before preempting;
// only accepted positions count as computed.
TEST(Scheduler, SpeculativeDraftsFitBudgetAndBlocks) {
  Sim sim(5, 4, false, {.max_num_batched_tokens = 4, .max_num_seqs = 4});
  Sequence* a = sim.add(prompt_of(3), 20);
  sim.step();  // prefill: 3 tokens, one sampled -> 4 tokens, 3 computed
  ASSERT_EQ(a->num_computed, 3);
  a->draft = {1, 2, 3, 4, 5};
  SchedulerOutput out = sim.sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].num_tokens, 4);  // budget 4: newest + 3 drafts
  EXPECT_EQ(out.chunks[0].num_draft, 3);
  EXPECT_EQ(out.chunks[0].num_logits, 4);
  EXPECT_EQ(a->draft.size(), 3u);
  EXPECT_EQ(sim.kv.block_table(a->id).size(), 2u);  // positions 0..6
  sim.sched.on_step_done(out);
  EXPECT_EQ(a->num_computed, 4);  // the newest token only
  // Two drafts accepted + the token after them.
  a->tokens.insert(a->tokens.end(), {1, 2, 9});
  sim.sched.accept_draft(a, 2);
  EXPECT_EQ(a->num_computed, 6);
  EXPECT_TRUE(a->draft.empty());
  sim.kv.check_invariants();
}

TEST(Scheduler, DraftsAreDroppedBeforeAnyonePreempts) {
  Sim sim(4, 4, false, {.max_num_batched_tokens = 16, .max_num_seqs = 4});
  Sequence* a = sim.add(prompt_of(3), 20);
  sim.step();  // a: 4 tokens, 3 computed, 1 block
  Sequence* b = sim.add(prompt_of(4, 1), 20);
  a->draft.clear();
  sim.step();  // a decodes at position 3 (same block), b prefills 4 tokens (1 block)
  ASSERT_EQ(sim.kv.num_free_blocks(), 2);
  ASSERT_EQ(a->num_computed, 4);
  // a's newest token is at position 4 (block 1); with 8 drafts it would need blocks
  // 1..3, three of the two free, while a alone and b's decode need one each.
  a->draft = {1, 2, 3, 4, 5, 6, 7, 8};
  SchedulerOutput out = sim.sched.schedule();
  EXPECT_TRUE(out.preempted.empty());
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq, a);
  EXPECT_EQ(out.chunks[0].num_draft, 0);
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_EQ(out.chunks[0].num_logits, 1);
  EXPECT_TRUE(a->draft.empty());
  EXPECT_EQ(out.chunks[1].seq, b);
  EXPECT_EQ(b->status, SeqStatus::kRunning);
  sim.kv.check_invariants();
}

TEST(Scheduler, RejectsConfigThatStarves) {
  KvCacheManager kv(4, 4, false);
  EXPECT_THROW(Scheduler({.max_num_batched_tokens = 4, .max_num_seqs = 8}, kv), Error);
}

// Many sequences under a cache far too small for all of them: every sequence must
// finish (no deadlock, no crash), references stay consistent, and all blocks come back.
TEST(Scheduler, StressUnderBlockExhaustionAlwaysCompletes) {
  for (bool prefix : {false, true}) {
    const int blocks = 24, block_size = 4;
    Sim sim(blocks, block_size, prefix, {.max_num_batched_tokens = 16, .max_num_seqs = 8});
    CounterRng rng(prefix ? 11 : 12);
    for (int i = 0; i < 60; ++i) {
      int prompt = 1 + static_cast<int>(rng.below(40));
      int gen = 1 + static_cast<int>(rng.below(30));
      if ((prompt + gen + block_size - 1) / block_size > blocks) gen = blocks * block_size - prompt;
      sim.add(prompt_of(prompt, static_cast<int>(rng.below(3))), gen);
    }
    sim.run_to_completion(20000);
    EXPECT_FALSE(sim.sched.has_work());
    for (size_t i = 0; i < sim.seqs.size(); ++i) EXPECT_EQ(sim.seqs[i]->num_generated(), sim.target[i]);
    EXPECT_GT(sim.sched.num_preemptions(), 0);
    EXPECT_EQ(sim.kv.num_active_blocks(), 0);
    EXPECT_EQ(sim.kv.num_free_blocks() + sim.kv.num_cached_blocks(), blocks);
  }
}

}  // namespace
}  // namespace distllm::serve
