// Pipeline schedules and stage splits without MPI: every micro-batch's forward
// precedes its backward, 1F1B keeps at most p - s micro-batches in flight, the
// schedules run without deadlock and idle (p-1)/(m+p-1) of the time when passes
// take equal time ((p-1)/(v*m+p-1) interleaved over v chunks per stage), their
// transfers complete under rendezvous semantics; layers split evenly with the
// extra ones on the first stages; a stage's parameter layout holds exactly its
// groups.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>

#include "distllm/base/error.h"
#include "distllm/model/param_layout.h"
#include "distllm/train/pipeline_schedule.h"
#include "distllm/train/pipeline_transfers.h"

namespace distllm {
namespace {

constexpr PipelineScheduleKind kKinds[] = {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B};

TEST(PipelineSchedule, EveryForwardPrecedesItsBackwardOnce) {
  for (PipelineScheduleKind kind : kKinds)
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 9; ++m)
        for (int s = 0; s < p; ++s) {
          const auto a = pipeline_schedule(kind, p, s, m);
          ASSERT_EQ(a.size(), static_cast<size_t>(2 * m));
          std::set<int> forwarded, backwarded;
          for (const PipelineAction& x : a) {
            if (x.forward) {
              EXPECT_TRUE(forwarded.insert(x.micro_batch).second);
            } else {
              EXPECT_TRUE(forwarded.count(x.micro_batch)) << "backward before forward";
              EXPECT_TRUE(backwarded.insert(x.micro_batch).second);
            }
          }
          EXPECT_EQ(backwarded.size(), static_cast<size_t>(m));
          // Both end with the last micro-batch's backward (where gradients are reduced).
          EXPECT_EQ(a.back(), (PipelineAction{false, m - 1}));
        }
}

TEST(PipelineSchedule, InFlightMicroBatches) {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 9; ++m)
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(max_in_flight(pipeline_schedule(PipelineScheduleKind::kGPipe, p, s, m)), m);
        const int one_f_one_b = max_in_flight(pipeline_schedule(PipelineScheduleKind::k1F1B, p, s, m));
        EXPECT_EQ(one_f_one_b, std::min(m, p - s)) << "p=" << p << " s=" << s << " m=" << m;
        EXPECT_LE(one_f_one_b, p);
      }
}

TEST(PipelineSchedule, OneFOneBOrder) {
  // Stage 0 of 4 with 6 micro-batches: 3 warm-up forwards, then alternate.
  const auto a = pipeline_schedule(PipelineScheduleKind::k1F1B, 4, 0, 6);
  const std::vector<PipelineAction> want = {{true, 0},  {true, 1},  {true, 2},  {true, 3},  {false, 0}, {true, 4},
                                            {false, 1}, {true, 5},  {false, 2}, {false, 3}, {false, 4}, {false, 5}};
  EXPECT_EQ(a, want);
}

TEST(PipelineSchedule, BubbleOfTheSimulatedScheduleIsTheIdealOne) {
  for (PipelineScheduleKind kind : kKinds)
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 9; ++m) {
        std::vector<std::vector<PipelineAction>> stages;
        for (int s = 0; s < p; ++s) stages.push_back(pipeline_schedule(kind, p, s, m));
        // Backward twice as long as forward, as in practice: the bubble is the same.
        const std::vector<double> idle = simulate_pipeline(stages, 1.0, 2.0);
        for (int s = 0; s < p; ++s)
          EXPECT_NEAR(idle[static_cast<size_t>(s)], ideal_bubble_fraction(p, m), 1e-12)
              << pipeline_schedule_name(kind) << " p=" << p << " m=" << m << " stage " << s;
      }
}

TEST(PipelineSchedule, SimulationFindsDeadlocks) {
  // Stage 1 wants micro-batch 1's backward before its forward could have come.
  std::vector<std::vector<PipelineAction>> stages = {{{true, 0}, {false, 0}, {true, 1}, {false, 1}},
                                                     {{true, 1}, {true, 0}, {false, 0}, {false, 1}}};
  EXPECT_THROW(simulate_pipeline(stages, 1, 1), Error);
}

TEST(PipelineSchedule, ParsesNames) {
  EXPECT_EQ(parse_pipeline_schedule("gpipe"), PipelineScheduleKind::kGPipe);
  EXPECT_EQ(parse_pipeline_schedule("1f1b"), PipelineScheduleKind::k1F1B);
  EXPECT_EQ(parse_pipeline_schedule("interleaved"), PipelineScheduleKind::kInterleaved);
  try {
    parse_pipeline_schedule("zigzag");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--pp-schedule"), std::string::npos);
  }
}

// The interleaved schedules the tests cover: p <= 4, v <= 3, m a multiple of p.
template <typename F>
void for_each_interleaved(F f) {
  for (int p = 2; p <= 4; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int m = p; m <= 4 * p; m += p) f(p, v, m);
}

std::vector<std::vector<PipelineAction>> all_stages(PipelineScheduleKind kind, int p, int m, int v = 1) {
  std::vector<std::vector<PipelineAction>> stages;
  for (int s = 0; s < p; ++s) stages.push_back(pipeline_schedule(kind, p, s, m, v));
  return stages;
}

TEST(PipelineSchedule, InterleavedEveryChunksForwardPrecedesItsBackwardOnce) {
  for_each_interleaved([](int p, int v, int m) {
    for (int s = 0; s < p; ++s) {
      const auto a = pipeline_schedule(PipelineScheduleKind::kInterleaved, p, s, m, v);
      ASSERT_EQ(a.size(), static_cast<size_t>(2 * m * v));
      std::set<std::pair<int, int>> forwarded, backwarded;
      for (const PipelineAction& x : a) {
        ASSERT_TRUE(x.chunk >= 0 && x.chunk < v && x.micro_batch >= 0 && x.micro_batch < m);
        const std::pair<int, int> key{x.micro_batch, x.chunk};
        if (x.forward) {
          EXPECT_TRUE(forwarded.insert(key).second);
        } else {
          EXPECT_TRUE(forwarded.count(key)) << "backward before forward";
          EXPECT_TRUE(backwarded.insert(key).second);
        }
      }
      EXPECT_EQ(backwarded.size(), static_cast<size_t>(m * v));
      // Every stage ends with its first chunk's backward of the last micro-batch.
      EXPECT_EQ(a.back(), (PipelineAction{false, m - 1, 0}));
    }
  });
}

TEST(PipelineSchedule, InterleavedOrder) {
  // p = 2, v = 2, m = 4, stage 0: (p-s-1)*2 + (v-1)*p = 4 warm-up forwards, the
  // micro-batches in groups of two per chunk; backwards start on the last chunk.
  const auto a = pipeline_schedule(PipelineScheduleKind::kInterleaved, 2, 0, 4, 2);
  const std::vector<PipelineAction> want = {
      {true, 0, 0},  {true, 1, 0},  {true, 0, 1},  {true, 1, 1},  {true, 2, 0},  {false, 0, 1},
      {true, 3, 0},  {false, 1, 1}, {true, 2, 1},  {false, 0, 0}, {true, 3, 1},  {false, 1, 0},
      {false, 2, 1}, {false, 3, 1}, {false, 2, 0}, {false, 3, 0}};
  EXPECT_EQ(a, want);
}

TEST(PipelineSchedule, InterleavedInFlightIsTheWarmUpPlusOne) {
  for_each_interleaved([](int p, int v, int m) {
    for (int s = 0; s < p; ++s) {
      const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, m * v);
      EXPECT_EQ(max_in_flight(pipeline_schedule(PipelineScheduleKind::kInterleaved, p, s, m, v)),
                std::min(warmup + 1, m * v))
          << "p=" << p << " v=" << v << " m=" << m << " s=" << s;
    }
  });
}

TEST(PipelineSchedule, InterleavedBubbleFallsToTheIdealOne) {
  for_each_interleaved([](int p, int v, int m) {
    const std::vector<double> idle = simulate_pipeline(all_stages(PipelineScheduleKind::kInterleaved, p, m, v), 1, 2);
    for (int s = 0; s < p; ++s)
      EXPECT_NEAR(idle[static_cast<size_t>(s)], static_cast<double>(p - 1) / (v * m + p - 1), 1e-9)
          << "p=" << p << " v=" << v << " m=" << m << " stage " << s;
  });
  EXPECT_NEAR(ideal_bubble_fraction(2, 4, 2), 1.0 / 9, 1e-15);
}

TEST(PipelineSchedule, InterleavedRefusesWhatMegatronRefuses) {
  EXPECT_THROW(pipeline_schedule(PipelineScheduleKind::kInterleaved, 2, 0, 3, 2), Error);
  EXPECT_THROW(pipeline_schedule(PipelineScheduleKind::k1F1B, 2, 0, 4, 2), Error);
  try {
    pipeline_schedule(PipelineScheduleKind::kInterleaved, 4, 0, 6, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 micro-batches, pp=4"), std::string::npos) << e.what();
  }
}

std::vector<std::vector<PipelineStep>> all_steps(PipelineScheduleKind kind, int p, int m, int v, bool forward_only) {
  std::vector<std::vector<PipelineStep>> steps;
  for (int s = 0; s < p; ++s) {
    auto a = pipeline_schedule(kind, p, s, m, v);
    if (forward_only) a = forward_passes(a);
    steps.push_back(pipeline_steps(a, p, s, v, !forward_only && pairs_passes(kind, p, m)));
  }
  return steps;
}

TEST(PipelineTransfers, EveryScheduleCompletesUnderRendezvous) {
  for (bool forward_only : {false, true}) {
    for (PipelineScheduleKind kind : kKinds)
      for (int p = 2; p <= 5; ++p)
        for (int m = 1; m <= 9; ++m) EXPECT_NO_THROW(check_transfers(all_steps(kind, p, m, 1, forward_only)));
    for_each_interleaved([&](int p, int v, int m) {
      EXPECT_NO_THROW(check_transfers(all_steps(PipelineScheduleKind::kInterleaved, p, m, v, forward_only)))
          << "p=" << p << " v=" << v << " m=" << m;
    });
  }
}

TEST(PipelineTransfers, OnePassUnitsDeadlockInterleavedSchedules) {
  // Why the interleaved steady state pairs its passes (pipeline_transfers.h).
  std::vector<std::vector<PipelineStep>> steps;
  for (int s = 0; s < 2; ++s)
    steps.push_back(pipeline_steps(pipeline_schedule(PipelineScheduleKind::kInterleaved, 2, s, 4, 2), 2, s, 2, false));
  EXPECT_THROW(check_transfers(steps), Error);
}

TEST(PipelineTransfers, EachPassReceivesItsInputAndSendsItsOutputOnce) {
  // Stage 1 of 2 with v = 2: chunks 1 and 3; chunk 3 is the last (no sends onward).
  const auto a = pipeline_schedule(PipelineScheduleKind::kInterleaved, 2, 1, 4, 2);
  int receives = 0, sends = 0;
  std::set<int> tags;
  for (const PipelineStep& st : pipeline_steps(a, 2, 1, 2, true))
    for (const PipelineTransfer& t : st.transfers) {
      (t.send ? sends : receives) += 1;
      EXPECT_EQ(t.peer, 0);
      tags.insert(t.tag);
    }
  // Forward: chunks 1 and 3 receive (8); backward: chunk 1 receives (4); chunk 1
  // sends forward (4); both send gradients back (8).
  EXPECT_EQ(receives, 12);
  EXPECT_EQ(sends, 12);
  EXPECT_EQ(tags.size(), 6u);  // activations into chunks 1, 2, 3; gradients into 0, 1, 2
}

TEST(StageRange, SplitsLayersEvenlyExtraOnTheFirstStages) {
  auto sizes = [](int n, int p) {
    std::vector<int> v;
    int next = 0;
    for (int s = 0; s < p; ++s) {
      StageRange r = StageRange::split(n, p, s);
      EXPECT_EQ(r.begin, next);
      next = r.end;
      v.push_back(r.layers());
    }
    EXPECT_EQ(next, n);
    return v;
  };
  EXPECT_EQ(sizes(12, 4), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(sizes(5, 4), (std::vector<int>{2, 1, 1, 1}));
  EXPECT_EQ(sizes(7, 3), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(sizes(4, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_TRUE(StageRange::split(3, 1, 0).is_whole());
  try {
    StageRange::split(3, 4, 0);
    FAIL() << "4 stages of 3 layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pp=4 pipeline stages but the model has 3 layers"), std::string::npos)
        << e.what();
  }
}

TEST(StageRange, WeighsTheOutputHead) {
  auto sizes = [](const ModelConfig& c, int p) {
    std::vector<int> v;
    for (int s = 0; s < p; ++s) v.push_back(StageRange::for_model(c, p, s).layers());
    return v;
  };
  // gpt2-124M: the head (50257 x 768) costs 5.5 layers.
  const ModelConfig gpt2 = ModelConfig::preset("gpt2-124M");
  EXPECT_NEAR(StageRange::head_cost(gpt2), 5.45, 0.01);
  EXPECT_EQ(sizes(gpt2, 2), (std::vector<int>{9, 3}));
  EXPECT_EQ(sizes(gpt2, 4), (std::vector<int>{4, 4, 3, 1}));
  // A byte-level vocabulary: the head is cheap and the split is even.
  ModelConfig bytes = ModelConfig::preset("gpt2-tiny");
  bytes.vocab_size = 256;
  EXPECT_EQ(sizes(bytes, 2), (std::vector<int>{3, 3}));
  EXPECT_EQ(sizes(bytes, 4), (std::vector<int>{2, 2, 1, 1}));
}

TEST(StageRange, LayoutHoldsOnlyTheStagesGroups) {
  for (bool tied : {true, false}) {
    ModelConfig c;
    c.family = ModelFamily::kLlama;
    c.vocab_size = 61, c.max_position = 16, c.n_layer = 5, c.n_head = 3, c.n_kv_head = 1, c.n_embd = 24;
    c.intermediate_size = 40, c.tie_embeddings = tied;
    c.normalize();
    const ParamLayout whole(c);
    std::vector<float> full(static_cast<size_t>(whole.total_size()));
    std::iota(full.begin(), full.end(), 0.0f);
    std::vector<int> held(whole.groups().size(), 0);
    for (int s = 0; s < 3; ++s) {
      const StageRange r = StageRange::split(5, 3, s);
      const ParamLayout stage(c, r);
      ASSERT_EQ(stage.groups().size(), whole.groups().size());
      for (int g = 0; g < static_cast<int>(stage.groups().size()); ++g) {
        const bool want = g == stage.embed_group()  ? r.holds_embedding(tied)
                          : g == stage.head_group() ? r.last()
                                                    : r.has_layer(g - 1);
        EXPECT_EQ(stage.has_group(g), want) << "stage " << s << " group " << g;
        EXPECT_EQ(stage.group_span(g) > 0, want);
        held[static_cast<size_t>(g)] += want;
      }
      // Whole -> stage -> whole keeps every tensor the stage holds.
      std::vector<float> local(static_cast<size_t>(stage.total_size()));
      copy_common_tensors(whole, full.data(), stage, local.data());
      std::vector<float> back(full.size(), -1.0f);
      copy_common_tensors(stage, local.data(), whole, back.data());
      for (const ParamTensor& t : stage.tensors()) {
        const ParamTensor& w = whole.tensor(t.name);
        for (int64_t i = 0; i < t.numel; ++i) ASSERT_EQ(back[w.offset + i], full[w.offset + i]) << t.name;
      }
    }
    // Every group on one stage; a tied table on the first and the last.
    for (size_t g = 0; g < held.size(); ++g) EXPECT_EQ(held[g], g == 0 && tied ? 2 : 1) << g;
  }
}

}  // namespace
}  // namespace distllm
