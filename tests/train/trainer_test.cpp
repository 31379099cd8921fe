#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/train/trainer.h"
#include "train/tiny_models.h"

namespace distllm {
namespace {

using testing::pattern_data;
using testing::tiny;

std::vector<double> run_losses(ModelFamily family, int threads, int steps) {
  int saved = num_threads();
  set_num_threads(threads);
  Transformer model(tiny(family));
  model.init_weights(5);
  TokenDataset data = pattern_data(4000);
  TrainOptions o;
  o.batch = 4, o.seq_len = 16, o.steps = steps, o.grad_accum = 2;
  o.schedule.max_lr = 3e-3, o.schedule.min_lr = 3e-4, o.schedule.warmup_steps = 2;
  Trainer trainer(model, data, nullptr, o);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer.step().loss);
  set_num_threads(saved);
  return losses;
}

TEST(Trainer, BitIdenticalAcrossRunsAndLossFalls) {
  for (auto family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    auto a = run_losses(family, 2, 30);
    auto b = run_losses(family, 2, 30);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;  // bit-identical
    EXPECT_LT(a.back(), a.front() - 1.0) << "a learnable pattern should be learned";
  }
}

TEST(Trainer, GradientAccumulationMatchesOneLargeBatch) {
  ModelConfig cfg = tiny(ModelFamily::kLlama);
  Transformer big(cfg), small(cfg);
  big.init_weights(3);
  small.init_weights(3);
  std::vector<int32_t> tok, tgt;
  testing::fixed_batch(4 * 16, tok, tgt);
  TrainGraph g4(cfg, 4, 16), g2(cfg, 2, 16);
  big.zero_grad();
  g4.forward(big, tok.data(), tgt.data(), true, 1.0f);
  g4.backward(big);
  small.zero_grad();
  for (int half = 0; half < 2; ++half) {
    g2.forward(small, tok.data() + half * 32, tgt.data() + half * 32, true, 0.5f);
    g2.backward(small);
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < big.size(); ++i) {
    num += std::pow(big.grads()[i] - small.grads()[i], 2);
    den += std::pow(big.grads()[i], 2);
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

TEST(Trainer, HooksFireInLayerOrder) {
  ModelConfig cfg = tiny(ModelFamily::kGpt2);
  Transformer model(cfg);
  model.init_weights(1);
  TrainGraph graph(cfg, 1, 8);
  std::vector<int> fwd, bwd;
  TrainHooks hooks;
  hooks.before_group_forward = [&](int g) { fwd.push_back(g); };
  hooks.group_grads_ready = [&](int g) { bwd.push_back(g); };
  std::vector<int32_t> tok(8, 1), tgt(8, 2);
  std::vector<int> after, before_bwd;
  hooks.after_group_forward = [&](int g) { after.push_back(g); };
  hooks.before_group_backward = [&](int g) { before_bwd.push_back(g); };
  graph.forward(model, tok.data(), tgt.data(), true, 1.0f, nullptr, &hooks);
  graph.backward(model, &hooks);
  EXPECT_EQ(fwd, (std::vector<int>{0, 1, 2, 3}));  // embed, layer 0, layer 1, head
  EXPECT_EQ(after, (std::vector<int>{0, 1, 2}));   // the head's backward starts inside forward
  EXPECT_EQ(before_bwd, (std::vector<int>{2, 1}));  // layers only: the embedding backward reads no weights
  EXPECT_EQ(bwd, (std::vector<int>{3, 2, 1, 0}));
  EXPECT_THROW(graph.backward(model), Error);  // needs a new forward first
  // Without gradients every group is released after its forward.
  after.clear();
  graph.forward(model, tok.data(), tgt.data(), false, 1.0f, nullptr, &hooks);
  EXPECT_EQ(after, (std::vector<int>{0, 1, 2, 3}));
}

// The contract data parallelism relies on: when group_grads_ready(g) fires, group
// g's gradients are final (nothing later in backward adds to them), so a bucket can
// be reduced right then. Checked by snapshotting each group at its hook.
TEST(Trainer, GroupGradientsAreFinalWhenTheirHookFires) {
  for (auto family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    for (bool tied : {true, false}) {
      ModelConfig cfg = tiny(family);
      if (family == ModelFamily::kGpt2 && !tied) continue;  // gpt2 is always tied
      cfg.tie_embeddings = tied;
      Transformer model(cfg);
      model.init_weights(4);
      TrainGraph graph(cfg, 2, 8);
      const ParamLayout& layout = model.layout();
      std::vector<std::vector<float>> snapshot(layout.groups().size());
      TrainHooks hooks;
      hooks.group_grads_ready = [&](int g) {
        const ParamGroup& grp = layout.groups()[static_cast<size_t>(g)];
        snapshot[static_cast<size_t>(g)].assign(model.grads() + grp.offset, model.grads() + grp.offset + grp.size);
      };
      std::vector<int32_t> tok(16), tgt(16);
      for (int i = 0; i < 16; ++i) tok[i] = (i * 11) % 64, tgt[i] = (i * 3 + 5) % 64;
      model.zero_grad();
      graph.forward(model, tok.data(), tgt.data(), true, 1.0f, nullptr, &hooks);
      graph.backward(model, &hooks);
      for (size_t g = 0; g < layout.groups().size(); ++g) {
        const ParamGroup& grp = layout.groups()[g];
        ASSERT_EQ(snapshot[g].size(), static_cast<size_t>(grp.size)) << "group " << g << " never reported";
        std::vector<float> final(model.grads() + grp.offset, model.grads() + grp.offset + grp.size);
        EXPECT_EQ(snapshot[g], final) << cfg.family_name() << (tied ? " tied" : " untied") << ": group " << grp.name
                                      << " changed after its group_grads_ready";
        double norm = 0;
        for (float x : final) norm += x * x;
        EXPECT_GT(norm, 0) << grp.name;
      }
    }
  }
}

// Activation checkpointing recomputes each checkpointed layer's forward inside
// backward: loss and gradients are bit-identical, with less activation memory.
TEST(Trainer, ActivationCheckpointingIsBitIdenticalAndSavesMemory) {
  for (auto family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    ModelConfig cfg = tiny(family);
    cfg.n_layer = 4;
    cfg.normalize();
    std::vector<int32_t> tok(4 * 16), tgt(4 * 16);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = (i * 17) % 64, tgt[i] = (i * 7 + 2) % 64;
    std::vector<float> ref_grads;
    float ref_loss = 0;
    size_t ref_bytes = 0;
    for (int every : {0, 1, 2, 3}) {
      Transformer model(cfg);
      model.init_weights(9);
      ActivationCheckpointing ckpt;
      ckpt.every = every;
      TrainGraph graph(cfg, 4, 16, ckpt);
      model.zero_grad();
      float loss = graph.forward(model, tok.data(), tgt.data(), true);
      graph.backward(model);
      std::vector<float> grads(model.grads(), model.grads() + model.size());
      if (every == 0) {
        ref_grads = grads, ref_loss = loss, ref_bytes = graph.activation_bytes();
        continue;
      }
      EXPECT_EQ(loss, ref_loss) << "every " << every;
      EXPECT_EQ(grads, ref_grads) << "every " << every;
      EXPECT_LT(graph.activation_bytes(), ref_bytes) << "every " << every;
    }
  }
  EXPECT_EQ(ActivationCheckpointing::parse("every:3").every, 3);
  EXPECT_EQ(ActivationCheckpointing::parse("all").every, 1);
  EXPECT_EQ(ActivationCheckpointing::parse("none").every, 0);
  EXPECT_THROW(ActivationCheckpointing::parse("every:0"), Error);
  EXPECT_THROW(ActivationCheckpointing::parse("some"), Error);
}

TEST(Trainer, BadInputIsAClearError) {
  ModelConfig cfg = tiny(ModelFamily::kGpt2);
  Transformer model(cfg);
  model.init_weights(1);
  TrainGraph graph(cfg, 1, 4);
  std::vector<int32_t> tok = {1, 2, 64, 3}, tgt = {1, 2, 3, 4};
  try {
    graph.forward(model, tok.data(), tgt.data(), false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "token id 64 at position 2 is outside the vocabulary [0, 64)");
  }
  EXPECT_THROW(TrainGraph(cfg, 1, 65), Error);  // longer than the context

  // A NaN in the weights stops training with a message, not garbage.
  model.params()[0] = std::numeric_limits<float>::quiet_NaN();
  TokenDataset data = TokenDataset::from_tokens(std::vector<uint32_t>(100, 0), 64, "zeros");
  TrainOptions o;
  o.batch = 1, o.seq_len = 4, o.steps = 3;
  std::vector<uint32_t> all_tokens(100);
  for (int i = 0; i < 100; ++i) all_tokens[i] = static_cast<uint32_t>(i % 64);
  TokenDataset varied = TokenDataset::from_tokens(all_tokens, 64, "varied");
  Trainer trainer(model, varied, nullptr, o);
  try {
    trainer.step();
    FAIL() << "NaN loss not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("became NaN at step 1"), std::string::npos) << e.what();
  }
  // Data from a bigger vocabulary is rejected before training starts.
  TokenDataset wide = TokenDataset::from_tokens(std::vector<uint32_t>(100, 70), 100, "wide");
  EXPECT_THROW(Trainer(model, wide, nullptr, o), Error);
}

TEST(LrSchedule, WarmupCosineAndFloor) {
  LrSchedule s;
  s.max_lr = 1.0, s.min_lr = 0.1, s.warmup_steps = 4, s.total_steps = 14;
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_NEAR(s.at(9), 0.55, 1e-12);  // halfway through the cosine
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);
  // A time budget half used decays as far as half the steps do; used up, to the floor.
  EXPECT_NEAR(s.at(5, 0.5), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(s.at(9, 0.1), s.at(9));  // the steps are further along than the clock
  EXPECT_DOUBLE_EQ(s.at(6, 1.0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(2, 0.9), 0.75);  // warmup follows the steps only
  s.kind = "linear";
  EXPECT_THROW(s.validate(), Error);
}

}  // namespace
}  // namespace distllm
