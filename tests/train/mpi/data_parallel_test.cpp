// Data-parallel training under mpirun -n N (N = 1..4, oversubscribed): every
// strategy reproduces the single-process run on N x the batch.
//
// The reference is computed by every rank itself: one process training the same
// model on the whole batch (the union of the ranks' slices, which the sampler
// guarantees). The bounds are the 1e-5 relative for fp32; measured at 1..4
// ranks: losses within 2e-7 relative, parameters after 20 AdamW steps within 4e-6
// (relative L2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include "distllm/base/memory_stats.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/comm/errors.h"
#include "distllm/comm/world.h"
#include "distllm/plan/plan.h"
#include "distllm/train/data_parallel.h"
#include "distllm/train/trainer.h"

#include "train_test_util.h"

namespace distllm {
namespace {

using namespace train_test;

TEST(DataParallelParity, EveryStrategyBothFamilies) {
  const int n = comm::world()->size();
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    Job s;
    s.family = family;
    Result ref = reference(s, n);
    for (Strategy st : kStrategies) expect_close(ref, distributed(s, config(st), group_for(st)), name(s, st, n));
  }
}

TEST(DataParallelParity, ClippingThatClipsAndNoClipping) {
  const int n = comm::world()->size();
  for (double clip : {0.05, 0.0}) {
    Job s;
    s.clip = clip;
    Result ref = reference(s, n);
    if (clip > 0) {
      int clipped = 0;
      for (double g : ref.norms) clipped += g > clip;
      ASSERT_EQ(clipped, kSteps) << "the clipping test must actually clip";
    }
    for (Strategy st : kStrategies) {
      Result got = distributed(s, config(st), group_for(st));
      expect_close(ref, got, name(s, st, n));
      for (size_t i = 0; i < ref.norms.size(); ++i)
        EXPECT_NEAR(got.norms[i], ref.norms[i], 1e-4 * ref.norms[i]) << name(s, st, n) << " step " << i;  // measured 1.1e-5
    }
  }
}

TEST(DataParallelParity, GradientAccumulation) {
  const int n = comm::world()->size();
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    Job s;
    s.family = family;
    s.grad_accum = 3;
    s.steps = 8;
    Result ref = reference(s, n);
    for (Strategy st : kStrategies) expect_close(ref, distributed(s, config(st), group_for(st)), name(s, st, n));
  }
}

TEST(DataParallelParity, Zero3ReshardPrefetchAndCheckpointingOptions) {
  const int n = comm::world()->size();
  Job s;
  Result ref = reference(s, n);
  ParallelConfig base = config(Strategy::kZero3);
  Result plain = distributed(s, base, comm::world());
  struct Variant {
    const char* what;
    bool reshard, prefetch;
    int checkpoint_every;
  };
  for (Variant v : {Variant{"no reshard", false, true, 0}, Variant{"no prefetch", true, false, 0},
                    Variant{"checkpoint all", true, true, 1}, Variant{"checkpoint every:2", false, true, 2}}) {
    ParallelConfig pc = base;
    pc.reshard_after_forward = v.reshard;
    pc.prefetch = v.prefetch;
    Job sv = s;
    sv.checkpointing.every = v.checkpoint_every;
    Result got = distributed(sv, pc, comm::world());
    expect_close(ref, got, std::string("zero3 ") + v.what);
    // None of these options changes the arithmetic: bit-identical to the plain run.
    EXPECT_EQ(got.losses, plain.losses) << v.what;
    EXPECT_EQ(got.params, plain.params) << v.what;
  }
}

TEST(DataParallel, SameSeedSameWorldIsBitIdentical) {
  Job s;
  for (Strategy st : kStrategies) {
    Result a = distributed(s, config(st), group_for(st));
    Result b = distributed(s, config(st), group_for(st));
    EXPECT_EQ(a.losses, b.losses) << strategy_name(st);
    EXPECT_EQ(a.params, b.params) << strategy_name(st);
  }
}

TEST(DataParallel, ReplicasStayIdentical) {
  Job s;
  s.steps = 3;
  for (Strategy st : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kHsdp}) {
    ParallelConfig pc = config(st);
    pc.check_replicas = true;  // throws on a difference
    EXPECT_NO_THROW(distributed(s, pc, group_for(st))) << strategy_name(st);
  }
}

TEST(DataParallel, Zero3FreesGatheredGroupsAndBoundsThem) {
  Job s;
  s.steps = 2;
  ModelConfig cfg = tiny(s.family);
  ParamLayout layout(cfg);
  for (bool prefetch : {true, false}) {
    ParallelConfig pc = config(Strategy::kZero3);
    pc.prefetch = prefetch;
    TrainOptions o = options(s, kBatch);
    DataParallel dp(cfg, pc, o.adamw, comm::world());
    dp.init_weights(s.seed);
    Trainer t(dp, dataset(), nullptr, o);
    for (int i = 0; i < s.steps; ++i) {
      t.step();
      EXPECT_EQ(dp.gathered_live_bytes(), 0);
    }
    // At most: a layer and the next one, or the head with the (tied) embedding and
    // the prefetched last layer.
    int64_t layer = layout.group_span(layout.layer_group(0)) * 4;
    int64_t head = (layout.group_span(layout.head_group()) + layout.group_span(layout.embed_group())) * 4;
    int64_t bound = std::max(2 * layer, head + (prefetch ? layer : 0));
    EXPECT_GT(dp.gathered_peak_bytes(), 0);
    EXPECT_LE(dp.gathered_peak_bytes(), bound) << "prefetch " << prefetch;
    EXPECT_GE(dp.gathers(), 2 * (cfg.n_layer + 2)) << "every group is gathered in forward and again in backward";
  }
}

TEST(DataParallel, PrefetchKeepsCollectiveOrderAcrossRanks) {
  // Debug mode compares every collective's kind and size across ranks before it
  // runs: a prefetch issued in a different order on some rank fails the run.
  auto w = comm::world();
  std::vector<int> all(static_cast<size_t>(w->size()));
  for (int r = 0; r < w->size(); ++r) all[static_cast<size_t>(r)] = r;
  comm::GroupOptions o = w->options();
  o.debug = true;
  o.name = "debug";
  auto debug_world = comm::new_group(all, o);
  Job s;
  s.steps = 4;
  s.grad_accum = 2;
  for (Strategy st : {Strategy::kZero3, Strategy::kZero2}) {
    ParallelConfig pc = config(st);
    EXPECT_NO_THROW(distributed(s, pc, debug_world)) << strategy_name(st);
  }
}

TEST(DataParallel, MixedPrecisionWithinToleranceOfFp32) {
  // Stated tolerances (docs/training.md): over 50 steps of a small gpt2 the loss
  // curve stays within 2e-3 of fp32 with bf16 gradients (measured: at most 9.3e-4
  // at 1..4 ranks) and within 2.5e-2 with bf16 parameters as well (measured: at
  // most 1.8e-2; rounding every weight to 8 bits of mantissa moves the loss itself).
  Job s;
  s.steps = 50;
  s.seed = 5;
  s.lr = 3e-3;
  s.model.n_layer = 4, s.model.n_head = 4, s.model.n_embd = 64, s.model.vocab_size = 61, s.model.max_position = 32;
  s.model.normalize();
  for (Strategy st : {Strategy::kDdp, Strategy::kZero3}) {
    Result fp32 = distributed(s, config(st), comm::world());
    for (MixedPrecision mp : {MixedPrecision::kBf16Comm, MixedPrecision::kBf16}) {
      ParallelConfig pc = config(st);
      pc.mixed_precision = mp;
      Result got = distributed(s, pc, comm::world());
      double worst = 0;
      for (size_t i = 0; i < fp32.losses.size(); ++i) worst = std::max(worst, std::fabs(fp32.losses[i] - got.losses[i]));
      EXPECT_LE(worst, mp == MixedPrecision::kBf16Comm ? 2e-3 : 2.5e-2) << strategy_name(st) << " "
                                                                          << mixed_precision_name(mp);
      if (comm::world()->size() > 1 || mp == MixedPrecision::kBf16) {
        EXPECT_GT(worst, 0.0) << "bf16 should change something";
      }
      if (std::getenv("DISTLLM_TEST_VERBOSE") && comm::world()->rank() == 0)
        std::fprintf(stderr, "%s %s: worst loss diff %.2e\n", strategy_name(st), mixed_precision_name(mp), worst);
    }
  }
}

TEST(DataParallel, MemoryMatchesThePlanWithinTenPercent) {
  const int n = comm::world()->size();
  const ModelConfig cfg = memory_model();
  const TokenDataset& data = memory_data();
  for (Strategy st : kStrategies) {
    for (int ckpt : {0, 1}) {
      ParallelConfig pc;
      pc.strategy = st;
      pc.bucket_mb = 0.5;
      pc.first_bucket_mb = 0.25;
      TrainOptions o;
      o.batch = 4, o.seq_len = 32, o.steps = 2;
      o.checkpointing.every = ckpt;
      const int64_t base = MemoryStats::current();
      MemoryStats::reset_peak();
      int64_t measured = 0;
      {
        DataParallel dp(cfg, pc, o.adamw, group_for(st));
        dp.init_weights(1);
        Trainer t(dp, data, nullptr, o);
        t.step();
        t.step();
        measured = MemoryStats::peak() - base;
      }
      plan::PlanInput in;
      in.model = cfg;
      in.world = n;
      in.hosts = group_for(st)->num_hosts();
      in.batch = o.batch, in.seq = o.seq_len;
      in.parallel = pc;
      in.checkpointing = o.checkpointing;
      plan::MachineRates rates;
      int64_t predicted = plan::estimate(in, rates).memory.total();
      double err = std::fabs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
      EXPECT_LE(err, 0.10) << strategy_name(st) << " checkpointing " << ckpt << ": plan " << predicted
                           << " B, measured " << measured << " B";
      if (std::getenv("DISTLLM_TEST_VERBOSE") && comm::world()->rank() == 0)
        std::fprintf(stderr, "memory %s ckpt %d np%d: plan %lld measured %lld (%.1f%%)\n", strategy_name(st), ckpt, n,
                     (long long)predicted, (long long)measured, 100 * err);
    }
  }
}

}  // namespace
}  // namespace distllm
