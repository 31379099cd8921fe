// Pipeline parallelism combined with the other dimensions of the mesh, under mpirun
// at 4 ranks: pp=2 x tp=2 (with and without sequence parallelism), pp=2 x cp=2, and
// dp=2 x pp=2 with every ZeRO stage train as one process does on the whole batch
// (losses, gradient norms, final parameters), both families, uneven layer splits;
// a pp x tp checkpoint resumes at other meshes and continues exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "distllm/base/strings.h"
#include "distllm/comm/world.h"
#include "distllm/train/model_parallel_groups.h"
#include "distllm/train/pipeline_parallel.h"
#include "train_test_util.h"

namespace distllm {
namespace {

using train_test::Result;

// gpt2: 3 layers (2 + 1 over two stages), 12 heads of 3, MLP 100, tied head.
ModelConfig gpt2_mesh() {
  ModelConfig c;
  c.vocab_size = 61, c.max_position = 16, c.n_layer = 3, c.n_head = 12, c.n_embd = 36, c.intermediate_size = 100;
  c.normalize();
  return c;
}

// llama: 3 layers, 12 query heads of 4 over `kv` key/value heads (tp=2 splits 4,
// replicates 1), width 44, MLP 50.
ModelConfig llama_mesh(int kv, bool tied) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 61, c.max_position = 16, c.n_layer = 3, c.n_head = 12, c.n_kv_head = kv, c.head_dim = 4;
  c.n_embd = 44, c.intermediate_size = 50, c.tie_embeddings = tied;
  c.normalize();
  return c;
}

struct MeshRun {
  std::string mesh;  // --mesh text
  int ranks = 4;
  Strategy strategy = Strategy::kNone;  // on dp (ddp when the reduction group has several ranks)
  bool sp = false;
  PipelineScheduleKind kind = PipelineScheduleKind::k1F1B;
  int micro_batches = 1;  // pipelines; grad_accum otherwise
  std::string describe() const {
    return strprintf("--mesh %s %s%s %s m=%d", mesh.c_str(), strategy_name(strategy), sp ? " sp" : "",
                     pipeline_schedule_name(kind), micro_batches);
  }
};

// `run` on the first run.ranks ranks (null elsewhere), as `distllm train --mesh`
// builds it, with `per_rank_batch` sequences per micro-batch; optionally resuming
// from and saving checkpoints in `dir`.
std::optional<Result> train_on_mesh(const ModelConfig& cfg, const MeshRun& run, int per_rank_batch,
                                    const std::string& dir = "", int64_t until = train_test::kSteps,
                                    int64_t save_at = 0, bool resume = false) {
  auto w = comm::world();
  if (run.ranks > w->size()) return std::nullopt;
  auto group = w->split(w->rank() < run.ranks ? 0 : -1, w->rank());
  if (!group) return std::nullopt;
  ModelParallelGroups g = make_model_parallel_groups(run.mesh, group, cfg, run.sp);
  train_test::Job job;
  TrainOptions o = train_test::options(job, per_rank_batch);
  if (g.pipeline.active()) {
    o.micro_batches = run.micro_batches, o.pipeline_schedule = run.kind;
  } else {
    o.grad_accum = run.micro_batches;
  }
  Strategy st = run.strategy;
  if (st == Strategy::kNone && g.data_parallel && g.data_parallel->size() > 1) st = Strategy::kDdp;
  DataParallel engine(cfg, train_test::config(st), o.adamw, g.data_parallel, g.tensor_parallel(),
                      g.context_parallel(), g.pipeline);
  engine.init_weights(11);
  engine.sync_parameters();
  if (!dir.empty()) return train_test::checkpointed_run(engine, o, group, dir, until, save_at, resume);
  Trainer t(engine, train_test::dataset(), nullptr, o);
  Result r;
  for (int i = 0; i < train_test::kSteps; ++i) {
    StepStats s = t.step();
    r.losses.push_back(s.loss), r.norms.push_back(s.grad_norm);
  }
  r.params.resize(static_cast<size_t>(ParamLayout(cfg).total_size()));
  engine.gather_full(r.params.data());
  return r;
}

// After twenty steps: measured at most 1.5e-6 (losses), 3.7e-5 (norms) and 2.1e-5
// (parameters, gpt2 on dp2 x pp2 under ZeRO-2/3, whose reduce-scatters sum in
// another order than DDP's all-reduce).
constexpr train_test::Tolerance kTwentySteps{.loss = 2e-5, .norm = 3e-4, .params = 4e-5};

void expect_mesh_parity(const ModelConfig& cfg, const MeshRun& run) {
  if (run.ranks > comm::world()->size()) return;
  const int dp = data_parallel_size(run.mesh, run.ranks);
  const std::string what = cfg.family_name() + " " + run.describe();
  const Result ref = train_test::train_single(cfg, train_test::kBatch * run.micro_batches * dp);
  auto got = train_on_mesh(cfg, run, train_test::kBatch);
  if (!got) return;
  // The first step differs from one process only in the order sums are taken (tp's
  // all-reduces, micro-batches, dp reductions, the tied table's two parts); a wrong
  // gradient anywhere shows here. Later steps amplify the rounding (AdamW at lr 1e-2).
  const double first_loss = std::abs(got->losses[0] - ref.losses[0]) / ref.losses[0];
  const double first_norm = std::abs(got->norms[0] - ref.norms[0]) / ref.norms[0];
  if (std::getenv("DISTLLM_TEST_VERBOSE") && comm::world()->rank() == 0)
    std::fprintf(stderr, "%s: first step loss %.2e norm %.2e\n", what.c_str(), first_loss, first_norm);
  EXPECT_LE(first_loss, 1e-6) << what;
  EXPECT_LE(first_norm, 1e-6) << what;
  train_test::expect_same_training(cfg, ref, *got, what, kTwentySteps);
}

constexpr auto kGPipe = PipelineScheduleKind::kGPipe;
constexpr auto k1F1B = PipelineScheduleKind::k1F1B;

TEST(MixedMesh, PipelineTimesTensorParallel) {
  expect_mesh_parity(gpt2_mesh(), {.mesh = "pp=2,tp=2", .kind = k1F1B, .micro_batches = 3});
  expect_mesh_parity(gpt2_mesh(), {.mesh = "tp=2,pp=2", .sp = true, .kind = kGPipe, .micro_batches = 2});
  expect_mesh_parity(llama_mesh(4, false), {.mesh = "pp=2,tp=2", .kind = k1F1B, .micro_batches = 4});
  // One key/value head replicated on both tp ranks, a tied head on the last stage.
  expect_mesh_parity(llama_mesh(1, true), {.mesh = "pp=2,tp=2", .sp = true, .kind = kGPipe, .micro_batches = 3});
}

TEST(MixedMesh, PipelineTimesContextParallel) {
  expect_mesh_parity(gpt2_mesh(), {.mesh = "pp=2,cp=2", .kind = k1F1B, .micro_batches = 3});
  expect_mesh_parity(llama_mesh(4, true), {.mesh = "cp=2,pp=2", .kind = kGPipe, .micro_batches = 2});
}

TEST(MixedMesh, EveryZeroStageOnPipelineStages) {
  // The tied table's gradient is summed between stages whose shards cover
  // different rows of it (gpt2, and the tied llama).
  for (Strategy st : {Strategy::kZero1, Strategy::kZero2, Strategy::kZero3})
    expect_mesh_parity(gpt2_mesh(), {.mesh = "dp=2,pp=2", .strategy = st, .kind = k1F1B, .micro_batches = 3});
  expect_mesh_parity(llama_mesh(4, true), {.mesh = "pp=2,dp=2", .strategy = Strategy::kZero3, .kind = kGPipe,
                                           .micro_batches = 2});
  expect_mesh_parity(llama_mesh(4, false), {.mesh = "dp=2,pp=2", .strategy = Strategy::kZero2, .kind = k1F1B,
                                            .micro_batches = 4});
}

TEST(MixedMeshCheckpoint, PipelineTimesTensorParallelResumesOnOtherMeshes) {
  constexpr int kGlobal = 4, kSave = 3, kSteps = 6;
  // Each leg keeps the global batch: kGlobal / (dp x micro-batches) per micro-batch.
  auto batch_of = [](const MeshRun& r) {
    return kGlobal / (data_parallel_size(r.mesh, r.ranks) * r.micro_batches);
  };
  const MeshRun pp_tp{.mesh = "pp=2,tp=2", .kind = k1F1B, .micro_batches = 2};
  const std::vector<std::pair<MeshRun, MeshRun>> moves = {
      {pp_tp, {.mesh = "", .ranks = 1}},
      {pp_tp, {.mesh = "tp=4", .ranks = 4}},
      {pp_tp, {.mesh = "dp=2,pp=2", .strategy = Strategy::kZero3, .kind = kGPipe, .micro_batches = 1}},
      {{.mesh = "dp=2,pp=2", .strategy = Strategy::kZero2, .micro_batches = 2}, pp_tp},
  };
  for (const ModelConfig& cfg : {gpt2_mesh(), llama_mesh(4, false)}) {
    // One process, uninterrupted: steps kSave+1 .. kSteps and the model after.
    const Result expected = train_test::train_single_from(cfg, kGlobal, 1, kSave, kSteps);
    for (const auto& [from, to] : moves) {
      if (from.ranks > comm::world()->size() || to.ranks > comm::world()->size()) continue;
      const std::string what = cfg.family_name() + " " + from.describe() + " -> " + to.describe();
      train_test::SharedDir dir;
      train_on_mesh(cfg, from, batch_of(from), dir.path(), kSave, kSave, false);
      auto got = train_on_mesh(cfg, to, batch_of(to), dir.path(), kSteps, 0, true);
      if (!got) continue;
      ASSERT_EQ(got->losses.size(), static_cast<size_t>(kSteps - kSave)) << what << ": should resume at step 3";
      train_test::expect_same_training(cfg, expected, *got, what);
    }
  }
}

}  // namespace
}  // namespace distllm
