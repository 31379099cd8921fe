// `distllm plan` against training, per rank, for the layouts training has beyond
// dp and tp: a pipeline of 2 stages (GPipe, 1F1B and interleaved with 2 chunks per
// stage; the plan's figure for each rank's stage) and a context-parallel ring of 2 (ring attention
// with DDP over the ring), at 2 ranks; at 4, each with dp=2 besides, and pp=2 with
// tp=2 (with and without SP), with cp=2, and with ZeRO on dp=2. Measured: every
// byte the ranks allocate (MemoryStats) over two steps, after the weights are
// initialised. The pipelines match to the byte (with none, DDP, ZeRO-1; see
// ZeroOnPipelineStages for ZeRO-2 and 3); the ring is over by 0.05% (0.08% with
// dp=2: the plan counts every token of the batch as a distinct embedding row to
// reduce). The 4-rank cases run in train_mpi_np4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/memory_stats.h"
#include "distllm/comm/world.h"
#include "distllm/plan/plan.h"
#include "distllm/train/model_parallel_groups.h"
#include "train_test_util.h"

namespace distllm {
namespace {

struct Case {
  const char* mesh;
  int dp = 1, tp = 1, pp = 1, cp = 1;
  bool sp = false;
  int micro_batches = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int virtual_stages = 1;
  Strategy strategy = Strategy::kDdp;
  double tolerance = 0.02;
};

void expect_plan_matches_training(const Case& c) {
  auto w = comm::world();
  const int n = c.dp * c.tp * c.pp * c.cp;
  auto group = w->split(w->rank() < n ? 0 : -1, w->rank());
  if (!group) return;
  const ModelConfig cfg = train_test::memory_model();  // gpt2, tied head
  ParallelConfig pc;
  pc.strategy = c.strategy;
  pc.bucket_mb = 0.5, pc.first_bucket_mb = 0.25;
  TrainOptions o;
  o.batch = 4, o.seq_len = 32, o.steps = 2;
  o.micro_batches = c.micro_batches;
  o.pipeline_schedule = c.schedule;
  o.virtual_stages = c.virtual_stages;
  ModelParallelGroups g = make_model_parallel_groups(c.mesh, group, cfg, c.sp, c.virtual_stages);
  const int stage = g.pipeline.active() ? g.pipeline.layers.stage : 0;
  const int64_t base = MemoryStats::current();
  int64_t measured = 0;
  {
    DataParallel engine(cfg, pc, o.adamw, g.data_parallel, g.tensor_parallel(), g.context_parallel(), g.pipeline);
    engine.init_weights(1);  // holds the whole model for a moment: not a training cost
    MemoryStats::reset_peak();
    Trainer t(engine, train_test::memory_data(), nullptr, o);
    t.step();
    t.step();
    measured = MemoryStats::peak() - base;
  }
  plan::PlanInput in;
  in.model = cfg;
  in.world = n, in.tp = c.tp, in.pp = c.pp, in.cp = c.cp, in.sequence_parallel = c.sp;
  in.micro_batches = c.micro_batches, in.pp_schedule = c.schedule, in.virtual_stages = c.virtual_stages;
  in.batch = o.batch, in.seq = o.seq_len;
  in.parallel = pc;
  const plan::Estimate e = plan::estimate(in, plan::MachineRates{});
  const int64_t predicted = e.stage_memory.at(static_cast<size_t>(stage)).total();
  const double err = std::abs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
  const std::string what =
      strprintf("%s%s%s %s, rank %d (stage %d)", c.mesh, c.sp ? " sp" : "",
                c.pp > 1 ? strprintf(" %s v=%d m=%d", pipeline_schedule_name(c.schedule), c.virtual_stages,
                                     c.micro_batches).c_str()
                         : "",
                strategy_name(c.strategy), group->rank(), stage);
  EXPECT_LE(err, c.tolerance) << what << ": plan " << predicted << " B, measured " << measured << " B";
  if (std::getenv("DISTLLM_TEST_VERBOSE"))
    std::fprintf(stderr, "memory %s: plan %lld measured %lld (%.3f%%)\n", what.c_str(), (long long)predicted,
                 (long long)measured, 100 * err);
}

TEST(PlanParallelMemory, PipelineStagesMatchTrainingWithinTwoPercent) {
  const int world = comm::world()->size();
  for (PipelineScheduleKind k : {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B}) {
    if (world >= 2)
      expect_plan_matches_training(
          {.mesh = "pp=2", .pp = 2, .micro_batches = 4, .schedule = k, .strategy = Strategy::kNone});
    if (world >= 4)
      expect_plan_matches_training({.mesh = "pp=2,dp=2", .dp = 2, .pp = 2, .micro_batches = 4, .schedule = k});
  }
}

// The interleaved schedule: each stage's chunks and the activation sets each chunk
// holds (PipelineParallel::graph_counts).
TEST(PlanParallelMemory, InterleavedChunksMatchTraining) {
  const int world = comm::world()->size();
  for (int m : {2, 4}) {
    if (world >= 2)
      expect_plan_matches_training({.mesh = "pp=2", .pp = 2, .micro_batches = m,
                                    .schedule = PipelineScheduleKind::kInterleaved, .virtual_stages = 2,
                                    .strategy = Strategy::kNone});
    if (world >= 4)
      expect_plan_matches_training({.mesh = "pp=2,dp=2", .dp = 2, .pp = 2, .micro_batches = m,
                                    .schedule = PipelineScheduleKind::kInterleaved, .virtual_stages = 2});
  }
}

TEST(PlanParallelMemory, ContextParallelRingMatchesTrainingWithinTwoPercent) {
  const int world = comm::world()->size();
  if (world >= 2) expect_plan_matches_training({.mesh = "cp=2", .cp = 2});
  if (world >= 4) expect_plan_matches_training({.mesh = "dp=2,cp=2", .dp = 2, .cp = 2});
}

TEST(PlanParallelMemory, PipelineWithTensorAndContextParallelism) {
  if (comm::world()->size() < 4) return;
  for (bool sp : {false, true})
    expect_plan_matches_training(
        {.mesh = "pp=2,tp=2", .tp = 2, .pp = 2, .sp = sp, .micro_batches = 4, .strategy = Strategy::kNone});
  expect_plan_matches_training({.mesh = "pp=2,cp=2", .pp = 2, .cp = 2, .micro_batches = 4});
}
TEST(PlanParallelMemory, ZeroOnPipelineStages) {
  if (comm::world()->size() < 4) return;
  // ZeRO-1 matches to the byte. ZeRO-2 and 3 add the peaks of their buckets and
  // gathered groups, which training does not reach at the same moment: over by
  // 2.4% (ZeRO-2) and 4.9-7.5% (ZeRO-3), within the data-parallel test's 10%.
  for (Strategy st : {Strategy::kZero1, Strategy::kZero2, Strategy::kZero3})
    expect_plan_matches_training({.mesh = "pp=2,dp=2",
                                  .dp = 2,
                                  .pp = 2,
                                  .micro_batches = 4,
                                  .strategy = st,
                                  .tolerance = st == Strategy::kZero1 ? 0.02 : 0.10});
}

}  // namespace
}  // namespace distllm
