// `distllm plan` with pipeline and context parallelism, on one process: the
// activations it predicts equal what TrainGraph allocates on every stage, memory
// falls as the layout spreads the model, the bubble follows (p-1)/(m+p-1), and bad
// layouts are refused naming the flag. (Multi-rank training against the plan:
// tests/train/mpi/plan_parallel_memory_test.cpp.)
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cli/run_command.h"
#include "distllm/base/error.h"
#include "distllm/model/train_graph.h"
#include "distllm/plan/graph_costs.h"
#include "distllm/plan/plan.h"

namespace distllm {
namespace {

ModelConfig model(ModelFamily family, bool tied) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 6, c.n_head = 4, c.n_embd = 64, c.vocab_size = 300, c.max_position = 128;
  if (family != ModelFamily::kGpt2) c.n_kv_head = 2, c.intermediate_size = 96;
  if (family == ModelFamily::kGemma2) c.final_logit_softcap = 30.0f;  // sandwich norms and a capped head
  c.tie_embeddings = tied;
  c.normalize();
  return c;
}

plan::PlanInput input(const ModelConfig& c, int pp, int cp, int m = 1) {
  plan::PlanInput in;
  in.model = c;
  in.world = pp * cp;
  in.pp = pp, in.cp = cp, in.micro_batches = m;
  in.batch = 2, in.seq = 64;
  in.parallel.strategy = cp > 1 ? Strategy::kDdp : Strategy::kNone;
  return in;
}

plan::Estimate estimate(const plan::PlanInput& in) { return plan::estimate(in, plan::MachineRates{}); }

TEST(PlanPipeline, ActivationsEqualWhatEachStageGraphAllocates) {
  for (ModelFamily f : {ModelFamily::kGpt2, ModelFamily::kLlama, ModelFamily::kGemma2})
    for (int every : {0, 2})
      for (int p : {1, 2, 3, 6}) {
        const ModelConfig c = model(f, f == ModelFamily::kGpt2);
        ActivationCheckpointing ckpt;
        ckpt.every = every;
        for (int s = 0; s < p; ++s) {
          const StageRange stage = StageRange::for_model(c, p, s);
          TrainGraph graph(c, 2, 64, ckpt, {}, {}, stage);
          plan::GraphShape g;
          g.local = &c, g.full = &c;
          g.batch = 2, g.seq = 64, g.rows = 2 * 64;
          g.checkpointing = ckpt;
          g.stage = stage;
          EXPECT_EQ(plan::activation_bytes(g), static_cast<int64_t>(graph.activation_bytes()))
              << c.describe() << " " << stage.describe() << " checkpointing every " << every;
        }
      }
}

TEST(PlanPipeline, ParametersFallWithStages) {
  for (bool tied : {false, true}) {
    int64_t before = 0;
    for (int p : {1, 2, 3, 6}) {
      const plan::Estimate e = estimate(input(model(ModelFamily::kLlama, tied), p, 1, p > 1 ? 4 : 1));
      if (p > 1) { EXPECT_LT(e.memory.params, before) << "pp " << p << (tied ? " tied" : ""); }
      EXPECT_EQ(e.memory.grads, e.memory.params);
      EXPECT_EQ(e.memory.optimizer, 2 * e.memory.params);
      before = e.memory.params;
    }
  }
}

TEST(PlanPipeline, OneFOneBKeepsNoMoreActivationsThanGPipe) {
  const ModelConfig c = model(ModelFamily::kGpt2, true);
  for (int p : {2, 3})
    for (int m : {1, 2, 4, 8}) {
      plan::PlanInput in = input(c, p, 1, m);
      in.pp_schedule = PipelineScheduleKind::kGPipe;
      const plan::Estimate gpipe = estimate(in);
      in.pp_schedule = PipelineScheduleKind::k1F1B;
      const plan::Estimate one = estimate(in);
      EXPECT_LE(one.memory.activations, gpipe.memory.activations) << "p " << p << " m " << m;
      if (m > p) { EXPECT_LT(one.memory.activations, gpipe.memory.activations) << "p " << p << " m " << m; }
      // GPipe's first stage keeps all m sets, 1F1B's min(m, p).
      plan::GraphShape g;
      g.local = &c, g.full = &c, g.batch = 2, g.seq = 64, g.rows = 128;
      g.stage = StageRange::for_model(c, p, 0);
      EXPECT_GE(gpipe.memory.activations, m * plan::activation_bytes(g));
      if (one.worst_stage == 0) { EXPECT_EQ(one.memory.activations, std::min(m, p) * plan::activation_bytes(g)); }
    }
}

TEST(PlanPipeline, BubbleIsPMinusOneOverMPlusPMinusOne) {
  const ModelConfig c = model(ModelFamily::kLlama, false);
  for (int p : {2, 3, 6})
    for (int m : {1, 4, 16}) {
      const plan::Estimate e = estimate(input(c, p, 1, m));
      EXPECT_NEAR(e.bubble_s / (e.compute_s + e.bubble_s), ideal_bubble_fraction(p, m), 1e-12) << p << " " << m;
      EXPECT_NEAR(e.bubble_s / (e.compute_s + e.bubble_s), (p - 1.0) / (m + p - 1.0), 1e-12);
      EXPECT_GT(e.comm_bytes, 0) << "activations and gradients between stages";
    }
  EXPECT_EQ(estimate(input(c, 1, 1)).bubble_s, 0.0);
}

void expect_refused(const plan::PlanInput& in, const std::string& flag);

// The interleaved schedule: v chunks per stage shrink the bubble to
// (p-1)/(v*m+p-1) and send v times the activations.
TEST(PlanPipeline, InterleavedBubbleShrinksWithTheChunks) {
  const ModelConfig c = model(ModelFamily::kLlama, false);
  for (int v : {2, 3}) {
    plan::PlanInput in = input(c, 2, 1, 4);
    const plan::Estimate one = estimate(in);
    in.pp_schedule = PipelineScheduleKind::kInterleaved, in.virtual_stages = v;
    const plan::Estimate e = estimate(in);
    EXPECT_NEAR(e.bubble_s / (e.compute_s + e.bubble_s), ideal_bubble_fraction(2, 4, v), 1e-12) << v;
    EXPECT_LT(e.bubble_s, one.bubble_s);
    EXPECT_GT(e.comm_bytes, one.comm_bytes) << "every chunk boundary sends";
  }
  plan::PlanInput in = input(c, 2, 1, 3);
  in.pp_schedule = PipelineScheduleKind::kInterleaved, in.virtual_stages = 2;
  expect_refused(in, "multiple");  // m must be a multiple of p
  in = input(c, 2, 1, 4);
  in.pp_schedule = PipelineScheduleKind::kInterleaved, in.virtual_stages = 4;
  expect_refused(in, "layers");  // 8 chunks of a 6-layer model
}

TEST(PlanContext, ActivationsFallWithTheRing) {
  for (ModelFamily f : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig c = model(f, true);
    int64_t before = 0;
    for (int cp : {1, 2, 4, 8}) {
      const plan::Estimate e = estimate(input(c, 1, cp));
      if (cp > 1) {
        EXPECT_LT(e.memory.activations, before) << c.describe() << " cp " << cp;
        EXPECT_GT(plan::ring_buffer_bytes(c, 2, 64, cp), 0);
        // The ring shifts are exposed: every step pays them.
        EXPECT_GT(e.exposed_comm_s, 0.0);
      }
      before = e.memory.activations;
    }
  }
}

TEST(PlanLayouts, CompareCoversEveryLayoutThatFits) {
  plan::PlanInput in = input(model(ModelFamily::kGpt2, true), 1, 1);
  in.world = 8, in.pp = 0, in.cp = 0, in.micro_batches = 4;
  std::set<std::string> layouts;
  for (const plan::Estimate& e : plan::compare(in, plan::MachineRates{}, 0)) {
    const plan::PlanInput& l = e.input;
    EXPECT_EQ(in.world % (l.pp * l.cp), 0);
    // Unpipelined layouts accumulate the micro-batches: the same batch per step.
    EXPECT_EQ(l.pp > 1 ? l.micro_batches : l.grad_accum, 4) << plan::describe_layout(e);
    layouts.insert(plan::describe_layout(e));
  }
  // pp 8 exceeds the 6 layers; cp 8 needs a multiple of 16 tokens, which 64 is.
  EXPECT_TRUE(layouts.count("dp8 tp1 pp1 cp1"));
  EXPECT_TRUE(layouts.count("dp1 tp1 pp2(1f1b,m4) cp4"));
  EXPECT_TRUE(layouts.count("dp1 tp1 pp1 cp8"));
  EXPECT_FALSE(layouts.count("dp1 tp1 pp8(1f1b,m4) cp1"));
  const plan::Estimate best = plan::recommend(in, plan::MachineRates{}, 1e12);
  EXPECT_NE(plan::describe_choice(best).find(" on dp"), std::string::npos);
}

void expect_refused(const plan::PlanInput& in, const std::string& flag) {
  try {
    estimate(in);
    ADD_FAILURE() << "accepted; expected an error naming " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(PlanLayouts, BadLayoutsNameTheFlag) {
  const ModelConfig c = model(ModelFamily::kGpt2, true);
  plan::PlanInput in = input(c, 2, 1, 4);
  in.world = 3;
  expect_refused(in, "--pp 2");
  in = input(c, 7, 1, 4);
  expect_refused(in, "--pp 7");  // more stages than layers
  in = input(c, 1, 1, 4);
  expect_refused(in, "--micro-batches 4");
  in = input(c, 2, 1, 4);
  in.grad_accum = 2;
  expect_refused(in, "--grad-accum 2");
  in = input(c, 1, 2);
  in.seq = 30;
  expect_refused(in, "--cp 2");
  in.seq = 256;  // the model's context is 128
  expect_refused(in, "--seq 256");
}

TEST(PlanCli, PipelineAndContextFlags) {
  using testing::run_distllm;
  const std::string base = "plan --preset gpt2-tiny --batch 2 --seq 64 --gemm-gflops 50 --busbw-gbs 5 ";
  auto ok = run_distllm(base + "--world 4 --pp 2 --cp 2 --micro-batches 4 --pp-schedule gpipe");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("layout"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("dp1 tp1 pp2(gpipe,m4) cp2"), std::string::npos) << ok.output;
  auto all = run_distllm(base + "--world 4 --pp all --cp all --micro-batches 2 --memory-gb 4");
  EXPECT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("dp2 tp1 pp2(1f1b,m2) cp1"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("recommended"), std::string::npos) << all.output;
  struct Bad {
    std::string args, names;
  };
  for (const Bad& b : {Bad{"--world 4 --pp 3", "--pp"}, Bad{"--world 4 --cp x", "--cp"},
                       Bad{"--world 4 --pp 2 --pp-schedule zigzag", "--pp-schedule"},
                       Bad{"--world 4 --micro-batches 4", "--micro-batches"},
                       Bad{"--world 4 --pp 2 --grad-accum 2", "--grad-accum"},
                       Bad{"--world 4 --pp 2 --cp 4", "--world"}, Bad{"--world 4 --pp all --strategy ddp", "--pp all"}}) {
    auto r = run_distllm(base + b.args);
    EXPECT_NE(r.exit_code, 0) << b.args;
    EXPECT_NE(r.output.find(b.names), std::string::npos) << b.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace distllm
