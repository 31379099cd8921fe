// Training with --compute-dtype bf16 (every linear product in kernels::gemm_bf16:
// bf16 inputs, f32 sums; master weights, gradients and optimizer state f32) against
// the same run in f32, on a gpt2-like and a llama-like tiny model.
//
// Tolerances, from measurements on the Sapphire Rapids VM:
// - First step's gradients: ||g_bf16 - g_f32|| / ||g_f32|| per parameter group is
//   at most 5.0e-3 (gpt2) and 5.0e-3 (llama): bf16 keeps 8 significant bits, each
//   input is off by up to 2^-9 relative. We require <= 2e-2, and > 1e-5 to prove
//   that the bf16 path ran.
// - Loss curves over 20 steps: |loss_bf16 - loss_f32| / loss_f32 is at most 1.7e-4
//   (gpt2) and 2.4e-4 (llama) at any step. We require <= 5e-3, and both losses must
//   fall by over 1.0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/kernels/gemm.h"
#include "distllm/train/trainer.h"
#include "train/tiny_models.h"

namespace distllm {
namespace {

using kernels::ComputeDtype;

constexpr int kEmbd = 64;

class ComputeDtypeBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::gemm_bf16_available())
      GTEST_SKIP() << "bf16 compute needs AVX512_BF16: " << kernels::gemm_bf16_unavailable_reason();
  }
};

const char* family_name(ModelFamily f) { return f == ModelFamily::kGpt2 ? "gpt2" : "llama"; }

std::vector<double> losses(ModelFamily family, ComputeDtype dtype, int steps) {
  Transformer model(testing::tiny(family, kEmbd));
  model.init_weights(5);
  TokenDataset data = testing::pattern_data(8000);
  TrainOptions o;
  o.batch = 4, o.seq_len = 32, o.steps = steps;
  o.schedule.max_lr = 3e-3, o.schedule.min_lr = 3e-4, o.schedule.warmup_steps = 2;
  o.compute_dtype = dtype;
  Trainer trainer(model, data, nullptr, o);
  EXPECT_EQ(trainer.graph().compute_dtype(), dtype);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) out.push_back(trainer.step().loss);
  return out;
}

TEST_F(ComputeDtypeBf16, LossCurvesFollowF32) {
  for (auto family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const auto f32 = losses(family, ComputeDtype::kF32, 20);
    const auto bf16 = losses(family, ComputeDtype::kBf16, 20);
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      const double rel = std::fabs(bf16[i] - f32[i]) / f32[i];
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 5e-3) << family_name(family) << " step " << i + 1 << ": bf16 " << bf16[i] << " f32 " << f32[i];
    }
    EXPECT_LT(bf16.back(), bf16.front() - 1.0) << family_name(family) << ": bf16 training should learn the pattern";
    EXPECT_LT(f32.back(), f32.front() - 1.0) << family_name(family);
    RecordProperty(std::string(family_name(family)) + "_worst_relative_loss_difference", std::to_string(worst));
  }
}

TEST_F(ComputeDtypeBf16, FirstStepGradientsWithinBf16Rounding) {
  for (auto family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    const ModelConfig cfg = testing::tiny(family, kEmbd);
    Transformer model(cfg);
    model.init_weights(3);
    std::vector<int32_t> tok, tgt;
    testing::fixed_batch(4 * 32, tok, tgt);
    TrainGraph gf(cfg, 4, 32), gb(cfg, 4, 32);
    gb.set_compute_dtype(ComputeDtype::kBf16);
    model.zero_grad();
    const float lf = gf.forward(model, tok.data(), tgt.data(), true);
    gf.backward(model);
    const std::vector<float> f32(model.grads(), model.grads() + model.size());
    model.zero_grad();
    const float lb = gb.forward(model, tok.data(), tgt.data(), true);
    gb.backward(model);
    EXPECT_NEAR(lb, lf, 1e-2 * lf) << family_name(family);
    double worst = 0;
    for (const auto& group : model.layout().groups()) {
      double num = 0, den = 0;
      for (int64_t i = group.offset; i < group.offset + group.size; ++i) {
        num += std::pow(static_cast<double>(model.grads()[i]) - f32[i], 2);
        den += std::pow(static_cast<double>(f32[i]), 2);
      }
      const double rel = std::sqrt(num / den);
      EXPECT_LE(rel, 2e-2) << family_name(family) << " group " << group.name;
      EXPECT_GT(rel, 1e-5) << family_name(family) << " group " << group.name << ": the bf16 GEMM did not run";
      worst = std::max(worst, rel);
    }
    RecordProperty(std::string(family_name(family)) + "_worst_relative_gradient_error", std::to_string(worst));
  }
}

TEST(ComputeDtype, ParseNamesAndRefusesWithoutAvx512Bf16) {
  EXPECT_EQ(kernels::parse_compute_dtype("bf16"), ComputeDtype::kBf16);
  EXPECT_STREQ(kernels::compute_dtype_name(ComputeDtype::kF32), "f32");
  EXPECT_THROW(kernels::parse_compute_dtype("fp16"), Error);
  // Below the avx512 level (or on a CPU without AVX512_BF16) asking for bf16 is a
  // clear error, before any step runs.
  set_isa_cap(Isa::kAvx2);
  TrainGraph graph(testing::tiny(ModelFamily::kGpt2), 1, 8);
  try {
    graph.set_compute_dtype(ComputeDtype::kBf16);
    ADD_FAILURE() << "bf16 compute accepted below avx512";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--compute-dtype bf16 needs AVX512_BF16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(graph.compute_dtype(), ComputeDtype::kF32);
  set_isa_cap(Isa::kAvx512);
}

}  // namespace
}  // namespace distllm
