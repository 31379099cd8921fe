// Tensor parallelism under mpirun: a tp group's forward and backward equal the
// single process (loss, and every gradient of each rank's shard), for both
// families, tp sizes 1..4, odd widths, an uneven MLP and vocabulary split, GQA with
// key/value heads split and replicated; and head counts that do not split are
// refused with an error naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/comm/world.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/model/train_graph.h"
#include "distllm/model/transformer.h"
#include "distllm/base/memory_stats.h"
#include "distllm/comm/context_parallel_comm.h"
#include "distllm/comm/device_mesh.h"
#include "distllm/comm/tensor_parallel_comm.h"
#include "distllm/train/checkpointing.h"
#include "distllm/train/data_parallel.h"
#include "distllm/plan/plan.h"
#include "distllm/train/trainer.h"
#include "train_test_util.h"

namespace distllm {
namespace {

constexpr int kB = 2, kT = 11;  // 22 rows: sequence parallelism splits them unevenly by 3 and 4

// gpt2: 12 heads of 3 (width 36), MLP 100 wide (splits unevenly by 3 and 4).
ModelConfig gpt2_tp() {
  ModelConfig c;
  c.vocab_size = 61, c.max_position = 16, c.n_layer = 2, c.n_head = 12, c.n_embd = 36, c.intermediate_size = 100;
  c.normalize();
  return c;
}

// llama: 12 query heads of 4 over `kv` key/value heads, width 44, MLP 50.
ModelConfig llama_tp(int kv, bool tied = false) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 61, c.max_position = 16, c.n_layer = 2, c.n_head = 12, c.n_kv_head = kv, c.head_dim = 4;
  c.n_embd = 44, c.intermediate_size = 50, c.tie_embeddings = tied;
  c.normalize();
  return c;
}

// Mistral: llama_tp(4) whose every query sees only its last `window` keys.
ModelConfig mistral_tp(int window) {
  ModelConfig c = llama_tp(4);
  c.family = ModelFamily::kMistral;
  c.max_position = 64, c.sliding_window = window;
  c.normalize();
  return c;
}

// A shard's flat parameter and gradient buffers (plan.local_layout()).
struct ShardBuffers : ParamSource {
  const ParamLayout& layout;
  std::vector<float> params, grads;
  explicit ShardBuffers(const ParamLayout& l)
      : layout(l), params(static_cast<size_t>(l.total_size())), grads(static_cast<size_t>(l.total_size())) {}
  float* group_params(int g) override { return params.data() + layout.groups().at(g).offset; }
  float* group_grads(int g) override { return grads.data() + layout.groups().at(g).offset; }
};

void batch(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  CounterRng rng(5);
  tokens.resize(kB * kT), targets.resize(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(61));
    targets[i] = i % 5 == 3 ? -100 : static_cast<int32_t>(rng.below(61));  // some ignored targets
  }
}

// The tp group of this rank: consecutive ranks; null for ranks left over.
comm::ProcessGroupPtr tp_group(int tp) {
  auto w = comm::world();
  const int groups = w->size() / tp;
  const int color = w->rank() / tp < groups ? w->rank() / tp : -1;
  return w->split(color, w->rank());
}

double max_rel_diff(const float* a, const float* b, int64_t n, double floor) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - b[i]) / std::max(floor, std::abs(double(b[i]))));
  return m;
}

void expect_parity(const ModelConfig& cfg, int tp, bool sp = false) {
  SCOPED_TRACE(cfg.describe() + " tp=" + std::to_string(tp) + (sp ? " sequence parallel" : ""));
  auto group = tp_group(tp);
  if (!group) return;
  std::vector<int32_t> tokens, targets;
  batch(tokens, targets);

  Transformer whole(cfg);
  whole.init_weights(17);
  whole.zero_grad();
  TrainGraph ref(cfg, kB, kT);
  const float ref_loss = ref.forward(whole, tokens.data(), targets.data(), true);
  ref.backward(whole);

  TensorParallelPlan plan(cfg, tp, group->rank());
  comm::GroupTensorParallelComm comm(group);
  ShardBuffers shard(plan.local_layout());
  plan.full_to_local(whole.params(), shard.params.data());
  TrainGraph graph(cfg, kB, kT, {}, TensorParallel{&plan, &comm, sp});
  ForwardArgs args;
  args.compute_grad = true;
  const float loss = graph.forward(shard, tokens.data(), targets.data(), args);
  graph.backward(shard);

  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::abs(ref_loss));  // measured: at most 1.2e-7
  // Every gradient of the shard equals the single process's at the same place.
  std::vector<float> expected(static_cast<size_t>(plan.local_layout().total_size()));
  plan.full_to_local(whole.grads(), expected.data());
  for (const ParamTensor& t : plan.local_layout().tensors()) {
    double d = max_rel_diff(shard.grads.data() + t.offset, expected.data() + t.offset, t.numel, 1e-3);
    EXPECT_LT(d, 1e-4) << t.name;  // measured: at most 1.6e-5
  }
  // Gathering every rank's shard gives back the whole model.
  std::vector<float> gathered(static_cast<size_t>(whole.size()), -1.0f);
  gather_tensor_parallel(comm, plan, shard.params.data(), gathered.data());
  for (const ParamTensor& t : whole.layout().tensors())
    for (int64_t i = 0; i < t.numel; ++i) ASSERT_EQ(gathered[t.offset + i], whole.params()[t.offset + i]) << t.name;
}

TEST(TensorParallelGraph, Gpt2MatchesTheSingleProcess) {
  for (int tp : {1, 2, 3, 4})
    if (tp <= comm::world()->size()) expect_parity(gpt2_tp(), tp);
}

TEST(TensorParallelGraph, LlamaWithKeyValueHeadsSplit) {
  for (int tp : {1, 2, 4})
    if (tp <= comm::world()->size()) expect_parity(llama_tp(4), tp);
}

TEST(TensorParallelGraph, LlamaWithKeyValueHeadsReplicated) {
  // 2 key/value heads over 4 ranks (each held by 2), and 1 over 2, 3 and 4 ranks.
  if (comm::world()->size() >= 4) expect_parity(llama_tp(2), 4);
  for (int tp : {2, 3, 4})
    if (tp <= comm::world()->size()) expect_parity(llama_tp(1, /*tied=*/true), tp);
}

// Families whose extra tensors split or sum differently: qwen2's q/k/v biases split
// with their heads; qwen3's q/k norm weights are replicated, each rank's heads give
// part of their gradient (a replicated key/value head counted once).
ModelConfig family_tp(ModelFamily family, int kv) {
  ModelConfig c = llama_tp(kv);
  c.family = family;
  c.normalize();
  return c;
}

TEST(TensorParallelGraph, Qwen2AndQwen3MatchTheSingleProcess) {
  for (int tp : {2, 3, 4}) {
    if (tp > comm::world()->size()) continue;
    if (12 % tp == 0 && (4 % tp == 0 || tp % 4 == 0)) expect_parity(family_tp(ModelFamily::kQwen2, 4), tp);
    expect_parity(family_tp(ModelFamily::kQwen3, 1), tp);  // one key/value head, on every rank
    if (tp == 4) expect_parity(family_tp(ModelFamily::kQwen3, 2), tp, /*sp=*/true);
  }
}

// Mistral's window under tensor (and sequence) parallelism: each rank's heads see
// the same window.
TEST(TensorParallelGraph, MistralSlidingWindowMatchesTheSingleProcess) {
  for (int tp : {2, 3, 4}) {
    if (tp > comm::world()->size()) continue;
    if (12 % tp == 0 && (4 % tp == 0 || tp % 4 == 0)) expect_parity(mistral_tp(5), tp, /*sp=*/tp == 2);
  }
}

// gemma2/gemma3: the sandwich norms run on each rank's rows of the residual stream
// (replicated weights, their gradients summed under sequence parallelism), the
// embedding scale on each rank's rows, and gemma2's logit soft-cap on each rank's
// slice of the vocabulary before the vocabulary-parallel cross-entropy.
TEST(TensorParallelGraph, Gemma2AndGemma3MatchTheSingleProcess) {
  ModelConfig gemma2 = family_tp(ModelFamily::kGemma2, 4);
  gemma2.final_logit_softcap = 0.05f;  // small enough to bend these small logits
  gemma2.normalize();
  for (int tp : {2, 3, 4}) {
    if (tp > comm::world()->size()) continue;
    if (4 % tp == 0) expect_parity(gemma2, tp, /*sp=*/tp == 2);
    expect_parity(family_tp(ModelFamily::kGemma3Text, 1), tp, /*sp=*/tp != 2);
  }
}

// phi3's fused matrices: each rank takes its heads out of q|k|v and its hidden units
// out of both halves of gate|up; a tp larger than the key/value heads is refused.
TEST(TensorParallelGraph, Phi3FusedMatricesMatchTheSingleProcess) {
  for (int tp : {2, 3, 4}) {
    if (tp > comm::world()->size()) continue;
    if (12 % tp == 0 && 4 % tp == 0) expect_parity(family_tp(ModelFamily::kPhi3, 4), tp, /*sp=*/tp == 2);
  }
  if (comm::world()->size() >= 4) {
    try {
      TensorParallelPlan plan(family_tp(ModelFamily::kPhi3, 2), 4, 0);
      FAIL() << "tp 4 over 2 key/value heads held in a fused qkv_proj was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("larger than the model's 2 key/value heads"), std::string::npos)
          << e.what();
    }
  }
}

TEST(TensorParallelGraph, SequenceParallelMatchesTheSingleProcess) {
  for (int tp : {2, 3, 4})
    if (tp <= comm::world()->size()) expect_parity(gpt2_tp(), tp, /*sp=*/true);
  for (int tp : {2, 4})
    if (tp <= comm::world()->size()) expect_parity(llama_tp(4), tp, true);
  if (comm::world()->size() >= 4) expect_parity(llama_tp(1, /*tied=*/true), 4, true);
}

// Context parallelism: each cp rank runs its two chunks of every sequence
// (ContextLayout) with ring attention; the sum of the ranks' losses and gradients
// is the single process's.
void expect_context_parallel_parity(ModelConfig cfg, int cp, int T) {
  cfg.max_position = T;
  SCOPED_TRACE(cfg.describe() + " cp=" + std::to_string(cp));
  auto group = tp_group(cp);  // consecutive ranks, as for tp
  if (!group) return;
  CounterRng rng(9);
  std::vector<int32_t> tokens(kB * T), targets(kB * T);
  for (int i = 0; i < kB * T; ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(61));
    targets[i] = i % 7 == 2 ? -100 : static_cast<int32_t>(rng.below(61));
  }
  int64_t valid = 0;
  for (int32_t t : targets) valid += t != -100;
  Transformer whole(cfg);
  whole.init_weights(23);
  whole.zero_grad();
  TrainGraph ref(cfg, kB, T);
  const float ref_loss = ref.forward(whole, tokens.data(), targets.data(), true);
  ref.backward(whole);

  comm::GroupContextParallelComm ring(group);
  const ContextLayout held(cp, group->rank(), T);
  const int Tl = held.local_len();
  std::vector<int32_t> my_tokens(kB * Tl), my_targets(kB * Tl);
  for (int b = 0; b < kB; ++b)
    for (int t = 0; t < Tl; ++t) {
      my_tokens[b * Tl + t] = tokens[b * T + held.position(t)];
      my_targets[b * Tl + t] = targets[b * T + held.position(t)];
    }
  Transformer mine(cfg);
  std::copy(whole.params(), whole.params() + whole.size(), mine.params());
  mine.zero_grad();
  TrainGraph graph(cfg, kB, T, {}, {}, ContextParallel{&ring});
  EXPECT_EQ(graph.seq_len(), Tl);
  ForwardArgs args;
  args.compute_grad = true;
  args.loss_normalizer = valid;  // the whole batch's, as data parallelism passes it
  float loss = graph.forward(mine, my_tokens.data(), my_targets.data(), args);
  graph.backward(mine);
  group->allreduce(&loss, 1, comm::DType::kF32);
  group->allreduce(mine.grads(), static_cast<size_t>(mine.size()), comm::DType::kF32);
  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::abs(ref_loss));
  for (const ParamTensor& t : whole.layout().tensors()) {
    const double d = max_rel_diff(mine.grads() + t.offset, whole.grads() + t.offset, t.numel, 1e-3);
    EXPECT_LT(d, 1e-4) << t.name;
  }
}

TEST(ContextParallelGraph, RingAttentionMatchesTheSingleProcess) {
  for (int cp : {2, 3, 4}) {
    if (cp > comm::world()->size()) continue;
    expect_context_parallel_parity(gpt2_tp(), cp, 2 * cp * 2);      // chunks of 2
    expect_context_parallel_parity(llama_tp(4), cp, 2 * cp * 3);    // GQA 3:1, chunks of 3
    // A sliding window across chunk boundaries: blocks of keys wholly behind every
    // query's window are skipped, partly visible ones masked row by row.
    expect_context_parallel_parity(mistral_tp(4), cp, 2 * cp * 3);
    expect_context_parallel_parity(mistral_tp(7), cp, 2 * cp * 2);
  }
}

TEST(TensorParallelGraph, RefusesHeadCountsThatDoNotSplit) {
  try {
    TensorParallelPlan plan(gpt2_tp(), 5, 0);
    FAIL() << "tp=5 of 12 heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos) << e.what();
  }
  try {
    TensorParallelPlan plan(llama_tp(4), 3, 0);  // 12 heads split, 4 key/value heads cannot
    FAIL() << "tp=3 of 4 key/value heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_head"), std::string::npos) << e.what();
  }
}

TEST(TensorParallelGraph, ShardsRoundTripAndTileTheModel) {
  // Every element of the whole model is in exactly one shard, or in every shard
  // for a replicated tensor.
  for (const ModelConfig& cfg : {gpt2_tp(), llama_tp(4), llama_tp(2)}) {
    for (int tp : {2, 4}) {
      const ParamLayout layout(cfg);
      std::vector<float> whole(static_cast<size_t>(layout.total_size()));
      for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i);
      std::vector<int> seen(whole.size(), 0);
      for (int r = 0; r < tp; ++r) {
        TensorParallelPlan plan(cfg, tp, r);
        std::vector<float> local(static_cast<size_t>(plan.local_layout().total_size()));
        plan.full_to_local(whole.data(), local.data());
        for (const ParamTensor& t : plan.local_layout().tensors())
          for (int64_t i = 0; i < t.numel; ++i) ++seen[static_cast<size_t>(local[t.offset + i])];
      }
      for (const ParamTensor& t : layout.tensors()) {
        TensorParallelPlan plan(cfg, tp, 0);
        const auto k = *plan.full_layout().find(t.name);
        int want = plan.slice(static_cast<int>(k)).replicated() ? tp : 1;
        if (plan.grad_needs_kv_sum(static_cast<int>(k))) want = plan.kv_replicas();
        for (int64_t i = 0; i < t.numel; ++i) ASSERT_EQ(seen[t.offset + i], want) << t.name << " tp=" << tp;
      }
    }
  }
}

// ---- training: DataParallel (any strategy on dp) over tensor-parallel shards ----

using train_test::expect_same_training;
using train_test::train_single;
using TrainRun = train_test::Result;

// dp x tp on the first dp * tp ranks (null elsewhere).
std::optional<TrainRun> train_mesh(const ModelConfig& cfg, int dp, int tp, Strategy strategy, bool sp = false,
                                   ActivationCheckpointing checkpointing = {}, int cp = 1) {
  auto w = comm::world();
  auto group = w->split(w->rank() < dp * cp * tp ? 0 : -1, w->rank());
  if (!group) return std::nullopt;
  comm::DeviceMesh mesh(group, {{"dp", dp}, {"cp", cp}, {"tp", tp}});
  TensorParallelPlan plan(cfg, tp, mesh.coord("tp"));
  comm::GroupTensorParallelComm tp_comm(mesh.group("tp"));
  comm::GroupContextParallelComm ring(mesh.group("cp"));
  train_test::Job job;
  job.checkpointing = checkpointing;
  TrainOptions o = train_test::options(job, train_test::kBatch);
  DataParallel engine(cfg, train_test::config(strategy), o.adamw, mesh.flatten({"dp", "cp"}),
                      TensorParallel{&plan, &tp_comm, sp}, ContextParallel{&ring});
  engine.init_weights(11);
  engine.sync_parameters();
  Trainer t(engine, train_test::dataset(), nullptr, o);
  TrainRun r;
  for (int i = 0; i < train_test::kSteps; ++i) {
    StepStats st = t.step();
    r.losses.push_back(st.loss), r.norms.push_back(st.grad_norm);
  }
  r.params.resize(static_cast<size_t>(ParamLayout(cfg).total_size()));
  engine.gather_full(r.params.data());
  return r;
}

void expect_mesh_parity(const ModelConfig& cfg, int dp, int tp, Strategy strategy, bool sp = false,
                        ActivationCheckpointing checkpointing = {}, int cp = 1) {
  if (dp * cp * tp > comm::world()->size()) return;
  const std::string what = strprintf("%s dp=%d cp=%d tp=%d %s%s checkpointing %s", cfg.describe().c_str(), dp, cp,
                                     tp, strategy_name(strategy), sp ? " sp" : "", checkpointing.describe().c_str());
  const TrainRun ref = train_single(cfg, train_test::kBatch * dp);
  if (auto got = train_mesh(cfg, dp, tp, strategy, sp, checkpointing, cp)) expect_same_training(cfg, ref, *got, what);
}

TEST(TensorParallelTraining, TpAloneMatchesTheSingleProcess) {
  for (int tp : {2, 3, 4}) expect_mesh_parity(gpt2_tp(), 1, tp, Strategy::kNone);
  for (int tp : {2, 4}) expect_mesh_parity(llama_tp(4), 1, tp, Strategy::kNone);
  // Key/value heads: 2 split over 2 ranks, each replicated on 2 of 4, 1 on all 4.
  expect_mesh_parity(llama_tp(2), 1, 2, Strategy::kNone);
  expect_mesh_parity(llama_tp(2), 1, 4, Strategy::kNone);
  expect_mesh_parity(llama_tp(1), 1, 4, Strategy::kNone);
}

TEST(TensorParallelTraining, SequenceParallelWithAndWithoutRecomputation) {
  for (int tp : {2, 3}) expect_mesh_parity(gpt2_tp(), 1, tp, Strategy::kNone, /*sp=*/true);
  expect_mesh_parity(llama_tp(4), 1, 4, Strategy::kNone, true, ActivationCheckpointing::parse("all"));
  expect_mesh_parity(gpt2_tp(), 2, 2, Strategy::kZero2, true, ActivationCheckpointing::parse("every:2"));
  expect_mesh_parity(llama_tp(2), 2, 2, Strategy::kZero3, true);
}

TEST(ContextParallelTraining, RingAttentionAloneAndOnAMesh) {
  // cp alone, both families; with dp (gradients reduced over dp x cp) and tp.
  for (int cp : {2, 4}) {
    expect_mesh_parity(gpt2_tp(), 1, 1, Strategy::kDdp, false, {}, cp);
    expect_mesh_parity(llama_tp(4), 1, 1, Strategy::kZero2, false, {}, cp);
  }
  expect_mesh_parity(llama_tp(2), 1, 1, Strategy::kDdp, false, ActivationCheckpointing::parse("all"), 2);
  expect_mesh_parity(gpt2_tp(), 2, 1, Strategy::kZero3, false, {}, 2);
  expect_mesh_parity(llama_tp(4), 1, 2, Strategy::kDdp, /*sp=*/true, {}, 2);
}

TEST(TensorParallelTraining, DataParallelOverTensorParallelShards) {
  // dp=2 x tp=2 with every data-parallel strategy, both families.
  for (Strategy st : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kZero3}) {
    expect_mesh_parity(gpt2_tp(), 2, 2, st);
    expect_mesh_parity(llama_tp(4), 2, 2, st);
  }
  expect_mesh_parity(llama_tp(1, /*tied=*/true), 2, 2, Strategy::kZero3);
}

TEST(TensorParallelTraining, MemoryMatchesThePlanWithinTenPercent) {
  const int world = comm::world()->size();
  const ModelConfig cfg = train_test::memory_model();
  const TokenDataset& data = train_test::memory_data();
  struct Case {
    int dp, tp;
    bool sp;
    Strategy strategy;
  };
  for (Case c : {Case{1, 2, false, Strategy::kNone}, Case{1, 2, true, Strategy::kNone},
                 Case{1, 4, true, Strategy::kNone}, Case{2, 2, false, Strategy::kZero2}}) {
    if (c.dp * c.tp > world) continue;
    auto w = comm::world();
    auto group = w->split(w->rank() < c.dp * c.tp ? 0 : -1, w->rank());
    if (!group) continue;
    comm::DeviceMesh mesh(group, {{"dp", c.dp}, {"tp", c.tp}});
    TensorParallelPlan plan(cfg, c.tp, mesh.coord("tp"));
    comm::GroupTensorParallelComm tp_comm(mesh.group("tp"));
    ParallelConfig pc;
    pc.strategy = c.strategy;
    pc.bucket_mb = 0.5, pc.first_bucket_mb = 0.25;
    TrainOptions o;
    o.batch = 4, o.seq_len = 32, o.steps = 2;
    const int64_t base = MemoryStats::current();
    int64_t measured = 0;
    {
      DataParallel engine(cfg, pc, o.adamw, mesh.group("dp"), TensorParallel{&plan, &tp_comm, c.sp});
      engine.init_weights(1);  // holds the whole model for a moment: not a training cost
      MemoryStats::reset_peak();
      Trainer t(engine, data, nullptr, o);
      t.step();
      t.step();
      measured = MemoryStats::peak() - base;
    }
    plan::PlanInput in;
    in.model = cfg;
    in.world = c.dp * c.tp, in.tp = c.tp, in.sequence_parallel = c.sp;
    in.batch = o.batch, in.seq = o.seq_len;
    in.parallel = pc;
    const int64_t predicted = plan::estimate(in, plan::MachineRates{}).memory.total();
    const double err = std::abs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
    const std::string what = strprintf("dp%d x tp%d%s %s", c.dp, c.tp, c.sp ? "+sp" : "", strategy_name(c.strategy));
    // The plan sizes the largest shard (ranks differ by the uneven vocabulary rows).
    // Measured: within 0.1% for tp alone, 0.9% for dp2 x tp2 zero2.
    EXPECT_LE(err, 0.10) << what << ": plan " << predicted << " B, measured " << measured << " B";
    if (std::getenv("DISTLLM_TEST_VERBOSE") && w->rank() == 0)
      std::fprintf(stderr, "memory %s: plan %lld measured %lld (%.1f%%)\n", what.c_str(), (long long)predicted,
                   (long long)measured, 100 * err);
  }
}

// ---- checkpoints: whole-model tensors, so they load at any tp size ----

// Trains dp x tp on the first ranks until `until` steps are done, resuming from
// `dir` first when asked and saving there at `save_at`.
TrainRun checkpoint_leg(const ModelConfig& cfg, int dp, int tp, Strategy strategy, int global_batch, const std::string& dir,
                   int64_t until, int64_t save_at, bool resume) {
  auto w = comm::world();
  auto group = w->split(w->rank() < dp * tp ? 0 : -1, w->rank());
  if (!group) return {};
  comm::DeviceMesh mesh(group, {{"dp", dp}, {"tp", tp}});
  TensorParallelPlan plan(cfg, tp, mesh.coord("tp"));
  comm::GroupTensorParallelComm tp_comm(mesh.group("tp"));
  train_test::Job job;
  TrainOptions o = train_test::options(job, global_batch / dp);
  DataParallel engine(cfg, train_test::config(strategy), o.adamw, mesh.group("dp"), TensorParallel{&plan, &tp_comm});
  engine.init_weights(11);
  engine.sync_parameters();
  return train_test::checkpointed_run(engine, o, group, dir, until, save_at, resume);
}

TEST(TensorParallelCheckpoint, LoadsAtAnotherTpSizeAndMesh) {
  const int world = comm::world()->size();
  constexpr int kGlobal = 4, kSave = 3, kSteps = 6;
  struct Layout {
    int dp, tp;
    Strategy strategy;
  };
  // tp=2 -> tp=1 and back, and across meshes with sharded optimizer state.
  const std::vector<std::pair<Layout, Layout>> moves = {
      {{1, 2, Strategy::kNone}, {1, 1, Strategy::kNone}},
      {{1, 1, Strategy::kNone}, {1, 2, Strategy::kNone}},
      {{2, 2, Strategy::kZero3}, {1, 4, Strategy::kNone}},
      {{1, 4, Strategy::kNone}, {2, 2, Strategy::kZero1}},
  };
  for (const ModelConfig& cfg : {gpt2_tp(), llama_tp(4)}) {
    // One process, uninterrupted: steps kSave+1 .. kSteps and the parameters after.
    const TrainRun expected = train_test::train_single_from(cfg, kGlobal, 1, kSave, kSteps);
    for (const auto& [from, to] : moves) {
      if (from.dp * from.tp > world || to.dp * to.tp > world) continue;
      const std::string what = strprintf("%s dp%d x tp%d %s -> dp%d x tp%d %s", cfg.family_name().c_str(), from.dp,
                                         from.tp, strategy_name(from.strategy), to.dp, to.tp,
                                         strategy_name(to.strategy));
      train_test::SharedDir dir;
      checkpoint_leg(cfg, from.dp, from.tp, from.strategy, kGlobal, dir.path(), kSave, kSave, false);
      TrainRun got = checkpoint_leg(cfg, to.dp, to.tp, to.strategy, kGlobal, dir.path(), kSteps, 0, true);
      if (comm::world()->rank() >= to.dp * to.tp) continue;
      ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps - kSave)) << what << ": should resume at step 3";
      expect_same_training(cfg, expected, got, what);
    }
  }
}

}  // namespace
}  // namespace distllm
