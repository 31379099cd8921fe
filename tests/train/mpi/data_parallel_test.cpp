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

namespace distllm {
namespace {

constexpr double kLossRel = 1e-5;
constexpr double kParamRel = 1e-5;
constexpr int kSteps = 20;
constexpr int kBatch = 2;  // per rank
constexpr int kSeq = 16;

ModelConfig tiny(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 61;  // odd sizes: no buffer divides evenly among 2, 3 or 4 ranks
  c.max_position = 32;
  if (family == ModelFamily::kGpt2) {
    c.n_layer = 3, c.n_head = 2, c.n_embd = 20;
  } else {
    c.n_layer = 2, c.n_head = 3, c.n_kv_head = 1, c.n_embd = 24, c.intermediate_size = 40;  // GQA 3:1
    c.tie_embeddings = false;
  }
  c.normalize();
  return c;
}

const TokenDataset& dataset() {
  static TokenDataset d = [] {
    std::vector<uint32_t> t(20000);
    CounterRng rng(99);
    for (size_t i = 0; i < t.size(); ++i)
      t[i] = i % 7 == 0 ? static_cast<uint32_t>(rng.below(61)) : static_cast<uint32_t>((i * 5 + i / 3) % 61);
    return TokenDataset::from_tokens(std::move(t), 61, "pattern");
  }();
  return d;
}

struct Result {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<float> params;
};

// Ranks share the machine's cores (oversubscribed runs would otherwise fight).
class ThreadsPerRank : public testing::Environment {
 public:
  void SetUp() override { set_num_threads(std::max(1, available_cpus() / comm::world()->size())); }
};
testing::Environment* const kThreads = testing::AddGlobalTestEnvironment(new ThreadsPerRank);

struct Job {
  ModelFamily family = ModelFamily::kGpt2;
  int grad_accum = 1;
  double clip = 1.0;
  int steps = kSteps;
  ActivationCheckpointing checkpointing;
  uint64_t seed = 11;
  ModelConfig model;  // empty: tiny(family)
  double lr = 1e-2;
  ModelConfig config() const { return model.n_layer > 0 && model.head_dim > 0 ? model : tiny(family); }
};

TrainOptions options(const Job& s, int batch) {
  TrainOptions o;
  o.batch = batch;
  o.seq_len = kSeq;
  o.grad_accum = s.grad_accum;
  o.steps = s.steps;
  o.schedule.max_lr = s.lr;
  o.schedule.min_lr = s.lr / 10;
  o.schedule.warmup_steps = 2;
  o.adamw.grad_clip = s.clip;
  o.seed = s.seed;
  o.checkpointing = s.checkpointing;
  return o;
}

// One process, the whole global batch.
Result reference(const Job& s, int world) {
  static std::map<std::tuple<int, int, double, int, int>, Result> cache;
  auto key = std::make_tuple(static_cast<int>(s.family), s.grad_accum, s.clip, world, s.steps);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Transformer model(tiny(s.family));
  model.init_weights(s.seed);
  Trainer t(model, dataset(), nullptr, options(s, kBatch * world));
  Result r;
  for (int i = 0; i < s.steps; ++i) {
    StepStats st = t.step();
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  r.params.assign(model.params(), model.params() + model.size());
  cache[key] = r;
  return r;
}

Result distributed(const Job& s, const ParallelConfig& pc, const comm::ProcessGroupPtr& group) {
  TrainOptions o = options(s, kBatch);
  DataParallel dp(s.config(), pc, o.adamw, group);
  dp.init_weights(s.seed);
  dp.sync_parameters();
  Trainer t(dp, dataset(), nullptr, o);
  Result r;
  for (int i = 0; i < s.steps; ++i) {
    StepStats st = t.step();
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
    if (pc.shards_params()) {
      EXPECT_EQ(dp.gathered_live_bytes(), 0) << "gathered groups must be freed after a step";
    }
  }
  r.params.resize(static_cast<size_t>(dp.layout().total_size()));
  dp.gather_full(r.params.data());
  return r;
}

void expect_close(const Result& ref, const Result& got, const std::string& what, double loss_rel = kLossRel,
                  double param_rel = kParamRel) {
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
  double worst_loss = 0;
  for (size_t i = 0; i < ref.losses.size(); ++i)
    worst_loss = std::max(worst_loss, std::fabs(ref.losses[i] - got.losses[i]) / std::fabs(ref.losses[i]));
  EXPECT_LE(worst_loss, loss_rel) << what << ": losses differ from the single-process run";
  ASSERT_EQ(ref.params.size(), got.params.size()) << what;
  // Parameters: the relative L2 error of the whole buffer, leaving out gpt2's key
  // bias. Softmax cancels that bias exactly, so its true gradient is zero and what
  // backward computes is rounding noise, which AdamW's normalisation turns into
  // lr-sized steps of random sign under any two summation orders (PyTorch's too).
  std::vector<bool> skip(ref.params.size());
  ParamLayout layout(tiny(ModelFamily::kGpt2));
  if (static_cast<int64_t>(ref.params.size()) == layout.total_size()) {
    const int64_t C = tiny(ModelFamily::kGpt2).n_embd;
    for (const auto& t : layout.tensors())
      if (t.name.find("attn.c_attn.bias") != std::string::npos)
        for (int64_t k = C; k < 2 * C; ++k) skip[static_cast<size_t>(t.offset + k)] = true;
  }
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    if (skip[i]) continue;
    double d = static_cast<double>(ref.params[i]) - got.params[i];
    diff2 += d * d;
    ref2 += static_cast<double>(ref.params[i]) * ref.params[i];
  }
  const double rel = std::sqrt(diff2 / ref2);
  EXPECT_LE(rel, param_rel) << what << ": final parameters differ from the single-process run";
  if (std::getenv("DISTLLM_TEST_VERBOSE") && comm::world()->rank() == 0)
    std::fprintf(stderr, "%s: loss rel %.2e, param rel %.2e\n", what.c_str(), worst_loss, rel);
}

ParallelConfig config(Strategy s) {
  ParallelConfig pc;
  pc.strategy = s;
  // Small buckets, so even these tiny models reduce in several buckets.
  pc.bucket_mb = 0.004;
  pc.first_bucket_mb = 0.002;
  return pc;
}

// HSDP needs hosts: a world of fake hosts of 2 ranks each (the comm layer's test
// option), so shard groups use shared memory and replicas cross "hosts".
comm::ProcessGroupPtr fake_hosts_world() {
  static comm::ProcessGroupPtr g = [] {
    auto w = comm::world();
    std::vector<int> all(static_cast<size_t>(w->size()));
    for (int r = 0; r < w->size(); ++r) all[static_cast<size_t>(r)] = r;
    comm::GroupOptions o = w->options();
    o.name = "fake-hosts";
    o.test_only_ranks_per_host = 2;
    return comm::new_group(all, o);
  }();
  return g;
}

const Strategy kStrategies[] = {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kZero3,
                                Strategy::kHsdp};

comm::ProcessGroupPtr group_for(Strategy s) { return s == Strategy::kHsdp ? fake_hosts_world() : comm::world(); }

std::string name(const Job& s, Strategy st, int n) {
  return strprintf("%s %s np%d accum %d clip %g", s.family == ModelFamily::kGpt2 ? "gpt2" : "llama",
                   strategy_name(st), n, s.grad_accum, s.clip);
}

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
  ModelConfig cfg;
  cfg.n_layer = 4, cfg.n_head = 4, cfg.n_embd = 128, cfg.vocab_size = 512, cfg.max_position = 64;
  cfg.normalize();
  std::vector<uint32_t> toks(50000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 31 + i / 7) % 512);
  TokenDataset data = TokenDataset::from_tokens(std::move(toks), 512, "memory");
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
