// Pipeline parallelism under mpirun: a pipeline of 2, 3 or 4 stages trains as the
// single process does on the whole batch (m micro-batches x batch sequences):
// losses, gradient norms and the final parameters, for both families (gpt2 with its
// tied head, llama with GQA 3:1, untied and tied), GPipe and 1F1B, m = 1, 3 and 4,
// layer counts the stages do not divide, and dp=2 x pp=2 with DDP at 4 ranks; a
// pipeline's checkpoint resumes at another pp size (or none) and continues exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include "distllm/base/error.h"
#include "distllm/comm/device_mesh.h"
#include "distllm/comm/world.h"
#include "distllm/train/checkpointing.h"
#include "distllm/train/model_parallel_groups.h"
#include "distllm/train/pipeline_parallel.h"
#include "train_test_util.h"

namespace distllm {
namespace {

using train_test::expect_error;
using train_test::Result;
using train_test::with_layers;

// dp x pp on the first dp * pp ranks (null elsewhere): pipelines of consecutive ranks.
std::optional<Result> train_pipeline(const ModelConfig& cfg, int dp, int pp, PipelineScheduleKind kind, int m,
                                     double* eval_loss = nullptr) {
  auto w = comm::world();
  auto group = w->split(w->rank() < dp * pp ? 0 : -1, w->rank());
  if (!group) return std::nullopt;
  comm::DeviceMesh mesh(group, {{"dp", dp}, {"pp", pp}});
  PipelineStage stage{StageRange::split(cfg.n_layer, pp, mesh.coord("pp")), mesh.group("pp")};
  train_test::Job job;
  TrainOptions o = train_test::options(job, train_test::kBatch);
  o.micro_batches = m;
  o.pipeline_schedule = kind;
  o.eval_batches = 3;
  DataParallel engine(cfg, train_test::config(dp > 1 ? Strategy::kDdp : Strategy::kNone), o.adamw, mesh.group("dp"),
                      {}, {}, stage);
  engine.init_weights(11);
  engine.sync_parameters();
  Trainer t(engine, train_test::dataset(), &train_test::dataset(), o);
  Result r;
  for (int i = 0; i < train_test::kSteps; ++i) {
    StepStats st = t.step();
    r.losses.push_back(st.loss), r.norms.push_back(st.grad_norm);
    EXPECT_EQ(st.stage_bubbles.size(), static_cast<size_t>(pp));
  }
  if (eval_loss) *eval_loss = t.evaluate();
  r.params.resize(static_cast<size_t>(ParamLayout(cfg).total_size()));
  engine.gather_full(r.params.data());
  return r;
}

void expect_pipeline_parity(const ModelConfig& cfg, int dp, int pp, PipelineScheduleKind kind, int m) {
  if (dp * pp > comm::world()->size()) return;
  const std::string what = strprintf("%s dp=%d pp=%d %s m=%d", cfg.describe().c_str(), dp, pp,
                                     pipeline_schedule_name(kind), m);
  const Result& ref = train_test::train_single_cached(cfg, train_test::kBatch * m * dp);
  auto got = train_pipeline(cfg, dp, pp, kind, m);
  if (!got) return;
  // Twenty AdamW steps at lr 1e-2 amplify the first step's rounding to at most
  // 2.1e-6 (losses), 2.9e-4 (norms: gpt2, whose key bias has a zero true gradient
  // and so a rounding-noise one) and 5.6e-6 (parameters).
  train_test::expect_same_first_step(ref, *got, what);
  train_test::expect_same_training(cfg, ref, *got, what, {.loss = 2e-5, .norm = 1e-3, .params = 2e-5});
}

constexpr PipelineScheduleKind kKinds[] = {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B};

TEST(PipelineParallel, Gpt2MatchesTheSingleProcess) {
  // 5 layers: 3+2 over 2 stages, 2+2+1 over 3, 2+1+1+1 over 4; the head is tied.
  const ModelConfig cfg = with_layers(ModelFamily::kGpt2, 5);
  for (int pp : {2, 3, 4})
    for (PipelineScheduleKind kind : kKinds)
      for (int m : {1, 3, 4}) expect_pipeline_parity(cfg, 1, pp, kind, m);
}

TEST(PipelineParallel, LlamaWithGroupedQueryAttention) {
  // 4 layers: even over 2 and 4 stages, 2+1+1 over 3.
  const ModelConfig cfg = with_layers(ModelFamily::kLlama, 4);
  for (int pp : {2, 3, 4})
    for (PipelineScheduleKind kind : kKinds)
      for (int m : {1, 3, 4}) expect_pipeline_parity(cfg, 1, pp, kind, m);
  // A tied head: the last stage's copy of the embedding table.
  for (PipelineScheduleKind kind : kKinds) expect_pipeline_parity(with_layers(ModelFamily::kLlama, 3, true), 1, 3, kind, 3);
}

TEST(PipelineParallel, DataParallelTimesPipeline) {
  // dp=2 x pp=2 (DDP on each stage's dp group), both families, both schedules.
  for (PipelineScheduleKind kind : kKinds) {
    expect_pipeline_parity(with_layers(ModelFamily::kGpt2, 3), 2, 2, kind, 3);
    expect_pipeline_parity(with_layers(ModelFamily::kLlama, 4), 2, 2, kind, 4);
  }
  expect_pipeline_parity(with_layers(ModelFamily::kLlama, 3, true), 2, 2, PipelineScheduleKind::k1F1B, 1);
}

TEST(PipelineParallel, EvaluationMatchesTheSingleProcess) {
  if (comm::world()->size() < 2) return;
  const ModelConfig cfg = with_layers(ModelFamily::kGpt2, 3);
  double got = 0;
  auto run = train_pipeline(cfg, 1, 2, PipelineScheduleKind::k1F1B, 2, &got);
  if (!run) return;
  // The same model and validation batches on one process.
  Transformer model(cfg);
  std::copy(run->params.begin(), run->params.end(), model.params());
  train_test::Job job;
  // The pipeline's validation batch is its step's batch: 2 micro-batches.
  TrainOptions o = train_test::options(job, 2 * train_test::kBatch);
  o.eval_batches = 3;
  Trainer single(model, train_test::dataset(), &train_test::dataset(), o);
  EXPECT_NEAR(got, single.evaluate(), 1e-5 * got);
}

// One leg of a checkpointed run on the first dp * pp ranks: m micro-batches a step
// through the pipeline, or (pp = 1) m accumulation steps, which draw the same data
// and, with every target valid, compute the same loss.
Result checkpoint_leg(const ModelConfig& cfg, int dp, int pp, int m, const std::string& dir, int64_t until,
                      int64_t save_at, bool resume) {
  auto w = comm::world();
  auto group = w->split(w->rank() < dp * pp ? 0 : -1, w->rank());
  if (!group) return {};
  comm::DeviceMesh mesh(group, {{"dp", dp}, {"pp", pp}});
  PipelineStage stage;
  if (pp > 1) stage = {StageRange::split(cfg.n_layer, pp, mesh.coord("pp")), mesh.group("pp")};
  train_test::Job job;
  TrainOptions o = train_test::options(job, train_test::kBatch);
  (pp > 1 ? o.micro_batches : o.grad_accum) = m;
  DataParallel engine(cfg, train_test::config(dp > 1 ? Strategy::kDdp : Strategy::kNone), o.adamw, mesh.group("dp"),
                      {}, {}, stage);
  engine.init_weights(11);
  engine.sync_parameters();
  return train_test::checkpointed_run(engine, o, group, dir, until, save_at, resume);
}

TEST(PipelineParallelCheckpoint, ResumesAtAnotherPipelineSize) {
  const int world = comm::world()->size();
  constexpr int kM = 2, kSave = 3, kSteps = 6;
  struct Layout {
    int dp, pp;
  };
  // The global batch stays (dp is kept): pp=2 -> none, none -> pp=3, dp2 x pp2 -> dp2
  // (DDP alone), pp=4 -> pp=2.
  const std::vector<std::pair<Layout, Layout>> moves = {
      {{1, 2}, {1, 1}}, {{1, 1}, {1, 3}}, {{2, 2}, {2, 1}}, {{1, 4}, {1, 2}}};
  for (const ModelConfig& cfg : {with_layers(ModelFamily::kGpt2, 5), with_layers(ModelFamily::kLlama, 4)}) {
    for (const auto& [from, to] : moves) {
      if (from.dp * from.pp > world || to.dp * to.pp > world) continue;
      // Uninterrupted, one process: the same data as dp ranks x m micro-batches.
      const Result expected = train_test::train_single_from(cfg, train_test::kBatch * to.dp, kM, kSave, kSteps);
      const std::string what = strprintf("%s dp%d x pp%d -> dp%d x pp%d", cfg.family_name().c_str(), from.dp,
                                         from.pp, to.dp, to.pp);
      train_test::SharedDir dir;
      checkpoint_leg(cfg, from.dp, from.pp, kM, dir.path(), kSave, kSave, false);
      Result got = checkpoint_leg(cfg, to.dp, to.pp, kM, dir.path(), kSteps, 0, true);
      if (comm::world()->rank() >= to.dp * to.pp) continue;
      train_test::expect_resumed(cfg, expected, got, what, kSave, kSteps);
    }
  }
}

TEST(PipelineParallel, RefusesWhatItDoesNotSupport) {
  if (comm::world()->size() < 2) return;
  auto pair = train_test::first_ranks(2);
  if (!pair) return;
  // More stages than layers; accumulation steps (a pipeline's are its micro-batches).
  expect_error([&] { make_model_parallel_groups("pp=2", pair, with_layers(ModelFamily::kGpt2, 1)); },
               "pp=2 pipeline stages but the model has 1 layer");
  const ModelConfig cfg = with_layers(ModelFamily::kGpt2, 2);
  ModelParallelGroups g = make_model_parallel_groups("pp=2", pair, cfg);
  DataParallel dp(cfg, train_test::config(Strategy::kNone), AdamWConfig{}, g.data_parallel, {}, {}, g.pipeline);
  train_test::Job job;
  job.grad_accum = 2;
  expect_error([&] { Trainer t(dp, train_test::dataset(), nullptr, train_test::options(job, 2)); },
               "--grad-accum 2 with pipeline parallelism: use --micro-batches");
}

}  // namespace
}  // namespace distllm
