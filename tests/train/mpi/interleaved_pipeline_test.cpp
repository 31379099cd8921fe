// The interleaved 1F1B schedule under mpirun: v model chunks per stage train as the
// single process does on the whole batch (losses, gradient norms, final
// parameters, with pipeline_parallel_test.cpp's tolerances): pp=2 with v=2 and 3,
// an uneven split (5 layers over 4 chunks: 2+1+1+1), pp=4 with v=2, both families
// (gpt2 with its tied head, llama with GQA 3:1, untied and tied), m = p and 2p;
// dp=2 x pp=2 under DDP, ZeRO-2 and ZeRO-3; evaluation; a pp=2 v=2 checkpoint
// resumes at one process; and what it refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "distllm/base/error.h"
#include "distllm/comm/world.h"
#include "distllm/train/model_parallel_groups.h"
#include "distllm/train/pipeline_parallel.h"
#include "train_test_util.h"

namespace distllm {
namespace {

using train_test::expect_error;
using train_test::Result;
using train_test::with_layers;

struct Run {
  int dp = 1, pp = 2, v = 2, m = 2;  // v = 1: the 1F1B schedule
  Strategy strategy = Strategy::kNone;  // ddp when dp > 1 and none is given
  std::string describe() const {
    return strprintf("dp=%d pp=%d v=%d m=%d %s", dp, pp, v, m, strategy_name(strategy));
  }
};

// The engine of `run` on the first dp * pp ranks (null elsewhere), as `distllm
// train --mesh dp=D,pp=P --pp-schedule interleaved --virtual-stages V` builds it.
struct Job {
  comm::ProcessGroupPtr group;
  ModelParallelGroups groups;
  std::unique_ptr<DataParallel> engine;
  TrainOptions options;
};

std::optional<Job> make_job(const ModelConfig& cfg, const Run& run) {
  auto group = train_test::first_ranks(run.dp * run.pp);
  if (!group) return std::nullopt;
  Job j;
  j.group = group;
  j.groups = make_model_parallel_groups(strprintf("dp=%d,pp=%d", run.dp, run.pp), group, cfg, false, run.v);
  train_test::Job job;
  j.options = train_test::options(job, train_test::kBatch);
  j.options.micro_batches = run.m;
  j.options.pipeline_schedule = run.v == 1 ? PipelineScheduleKind::k1F1B : PipelineScheduleKind::kInterleaved;
  j.options.virtual_stages = run.v;
  j.options.eval_batches = 3;
  Strategy st = run.strategy == Strategy::kNone && run.dp > 1 ? Strategy::kDdp : run.strategy;
  j.engine = std::make_unique<DataParallel>(cfg, train_test::config(st), j.options.adamw, j.groups.data_parallel,
                                            TensorParallel{}, ContextParallel{}, j.groups.pipeline);
  j.engine->init_weights(11);
  j.engine->sync_parameters();
  return j;
}

std::optional<Result> train_interleaved(const ModelConfig& cfg, const Run& run, double* eval_loss = nullptr) {
  auto job = make_job(cfg, run);
  if (!job) return std::nullopt;
  Trainer t(*job->engine, train_test::dataset(), &train_test::dataset(), job->options);
  Result r;
  for (int i = 0; i < train_test::kSteps; ++i) {
    StepStats st = t.step();
    r.losses.push_back(st.loss), r.norms.push_back(st.grad_norm);
    EXPECT_EQ(st.stage_bubbles.size(), static_cast<size_t>(run.pp));
    EXPECT_NEAR(st.ideal_bubble, ideal_bubble_fraction(run.pp, run.m, run.v), 1e-12);
  }
  if (eval_loss) *eval_loss = t.evaluate();
  r.params.resize(static_cast<size_t>(ParamLayout(cfg).total_size()));
  job->engine->gather_full(r.params.data());
  return r;
}

// against_1f1b: after the first step, compare with the 1F1B pipeline of the same
// stages instead (for a model whose training amplifies rounding chaotically: 1F1B
// then departs from one process in the same way, while the two schedules agree).
void expect_parity(const ModelConfig& cfg, const Run& run, bool against_1f1b = false) {
  if (run.dp * run.pp > comm::world()->size()) return;
  const std::string what = cfg.describe() + " " + run.describe();
  const Result& ref = train_test::train_single_cached(cfg, train_test::kBatch * run.m * run.dp);
  auto got = train_interleaved(cfg, run);
  Run one = run;
  one.v = 1;
  auto plain = against_1f1b ? train_interleaved(cfg, one) : std::nullopt;  // collective: every rank
  if (!got) return;
  if (plain) {
    train_test::expect_same_training(cfg, *plain, *got, what + " against 1f1b",
                                     {.loss = 1e-6, .norm = 1e-5, .params = 1e-6});
  }
  // As pipeline_parallel_test.cpp: twenty AdamW steps at lr 1e-2 amplify the first
  // step's rounding.
  train_test::expect_same_first_step(ref, *got, what);
  if (!against_1f1b)
    train_test::expect_same_training(cfg, ref, *got, what, {.loss = 2e-5, .norm = 1e-3, .params = 2e-5});
}

TEST(InterleavedPipeline, TwoStagesMatchTheSingleProcess) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama})
    for (int m : {2, 4}) {
      expect_parity(with_layers(family, 4), {.pp = 2, .v = 2, .m = m});
      // gpt2 with 6 layers and a batch of 4 sequences departs from one process by
      // step 10 under 1F1B too (rounding, amplified: 2.8e-3 in loss by step 20);
      // at m = 4 too with distllm's sgemm (norm 1.1e-3 at step 20, 3.1e-4 with
      // OpenBLAS; first step within 1.4e-8 with either). Those runs are held to
      // the first step and to 1F1B, bit for bit.
      const bool chaotic = family == ModelFamily::kGpt2;
      expect_parity(with_layers(family, 6), {.pp = 2, .v = 3, .m = m}, chaotic);
    }
  // Uneven chunks: 5 layers over 4 chunks split 2+1+1+1 (stage 0: 3 layers).
  expect_parity(with_layers(ModelFamily::kGpt2, 5), {.pp = 2, .v = 2, .m = 2});
  // A tied llama head: the table's copy on stage 1, which holds the last chunk.
  expect_parity(with_layers(ModelFamily::kLlama, 4, true), {.pp = 2, .v = 2, .m = 4});
}

TEST(InterleavedPipeline, FourStagesMatchTheSingleProcess) {
  // gpt2 with 8 layers and a batch of 8 sequences amplifies rounding too (2e-2 in
  // the norms by step 20, as under 1F1B).
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama})
    for (int m : {4, 8})
      expect_parity(with_layers(family, 8), {.pp = 4, .v = 2, .m = m}, family == ModelFamily::kGpt2 && m == 4);
}

TEST(InterleavedPipeline, DataParallelTimesPipeline) {
  for (Strategy st : {Strategy::kDdp, Strategy::kZero2, Strategy::kZero3}) {
    expect_parity(with_layers(ModelFamily::kGpt2, 4), {.dp = 2, .pp = 2, .v = 2, .m = 2, .strategy = st});
    expect_parity(with_layers(ModelFamily::kLlama, 4), {.dp = 2, .pp = 2, .v = 2, .m = 4, .strategy = st});
  }
}

TEST(InterleavedPipeline, EvaluationMatchesTheSingleProcess) {
  if (comm::world()->size() < 2) return;
  const ModelConfig cfg = with_layers(ModelFamily::kGpt2, 4);
  double got = 0;
  auto run = train_interleaved(cfg, {.pp = 2, .v = 2, .m = 2}, &got);
  if (!run) return;
  Transformer model(cfg);
  std::copy(run->params.begin(), run->params.end(), model.params());
  train_test::Job job;
  TrainOptions o = train_test::options(job, 2 * train_test::kBatch);  // the step's batch
  o.eval_batches = 3;
  Trainer single(model, train_test::dataset(), &train_test::dataset(), o);
  EXPECT_NEAR(got, single.evaluate(), 1e-5 * got);
}

TEST(InterleavedPipeline, CheckpointResumesAtOneProcess) {
  constexpr int kM = 2, kSave = 3, kSteps = 6;
  for (const ModelConfig& cfg : {with_layers(ModelFamily::kGpt2, 4), with_layers(ModelFamily::kLlama, 4)}) {
    if (comm::world()->size() < 2) return;
    // Uninterrupted, one process, the same data: kM accumulation steps.
    const Result expected = train_test::train_single_from(cfg, train_test::kBatch, kM, kSave, kSteps);
    train_test::SharedDir dir;
    if (auto job = make_job(cfg, {.pp = 2, .v = 2, .m = kM}))
      train_test::checkpointed_run(*job->engine, job->options, job->group, dir.path(), kSave, kSave, false);
    auto one = train_test::first_ranks(1);
    if (!one) continue;
    DataParallel engine(cfg, train_test::config(Strategy::kNone), AdamWConfig{}, one);
    engine.init_weights(11);
    train_test::Job job;
    TrainOptions o = train_test::options(job, train_test::kBatch);
    o.grad_accum = kM;
    Result got = train_test::checkpointed_run(engine, o, one, dir.path(), kSteps, 0, true);
    train_test::expect_resumed(cfg, expected, got, cfg.family_name() + " pp2 v2 -> one process", kSave, kSteps);
  }
}

TEST(InterleavedPipeline, RefusesWhatItCannotRun) {
  if (comm::world()->size() < 2) return;
  auto pair = train_test::first_ranks(2);
  if (!pair) return;
  expect_error([&] { make_model_parallel_groups("pp=2", pair, with_layers(ModelFamily::kGpt2, 3), false, 2); },
               "pp=2 with --virtual-stages 2 makes 4 model chunks but the model has 3 layers");
  expect_error([&] { check_pipeline_schedule(PipelineScheduleKind::kInterleaved, 2, 3, 2); },
               "3 micro-batches, pp=2");
  expect_error([&] { check_pipeline_schedule(PipelineScheduleKind::k1F1B, 2, 4, 2); },
               "--virtual-stages 2 needs --pp-schedule interleaved");
  expect_error([&] { check_pipeline_schedule(PipelineScheduleKind::kInterleaved, 2, 4, 1); },
               "--pp-schedule interleaved needs --virtual-stages V >= 2");
}

}  // namespace
}  // namespace distllm
