// Which recorded settings make a checkpoint another run's (train/run_identity.h).
#include "distllm/train/run_identity.h"

#include <gtest/gtest.h>

namespace distllm {
namespace {

using nlohmann::json;

json run() {
  return {{"training data", "100 tokens, 1 shards, hash 00ff"},
          {"--seed", "5"},
          {"--lr", "0.00059999999999999995"},
          {"--schedule", "cosine"},
          {"--steps", "100"},
          {"--batch", "8"},
          {"--strategy", "ddp"},
          {"model config", "{}"}};
}

TEST(RunIdentity, TheSameRunAcrossStrategiesBatchSplitsAndMissingFields) {
  EXPECT_EQ(run_identity_difference(run(), run()), "");
  json other = run();
  other["--strategy"] = "zero3";
  other["--batch"] = "4";  // another split of the global batch (checked apart)
  EXPECT_EQ(run_identity_difference(run(), other), "");
  // A checkpoint of an older build, or of `distllm convert`, records less.
  EXPECT_EQ(run_identity_difference(json::object(), run()), "");
  EXPECT_EQ(run_identity_difference({{"converted_from", "hf/"}}, run()), "");
}

TEST(RunIdentity, NamesTheFirstSettingThatDiffers) {
  json other = run();
  other["--seed"] = "6";
  other["--lr"] = "0.001";
  EXPECT_EQ(run_identity_difference(run(), other), "--seed is 5 in the checkpoint but 6 here");
  other = run();
  other["--lr"] = "0.001";
  EXPECT_EQ(run_identity_difference(run(), other), "--lr is 0.0006 in the checkpoint but 0.001 here");
  other = run();
  other["training data"] = "100 tokens, 1 shards, hash 0100";
  EXPECT_EQ(run_identity_difference(run(), other),
            "training data is '100 tokens, 1 shards, hash 00ff' in the checkpoint but '100 tokens, 1 shards, hash "
            "0100' here");
}

TEST(RunIdentity, StepsAreTheCosineScheduleLengthOnly) {
  json longer = run();
  longer["--steps"] = "200";
  EXPECT_EQ(run_identity_difference(run(), longer),
            "--steps (the length of the cosine schedule) is 100 in the checkpoint but 200 here");
  json constant = run(), constant_longer = longer;
  constant["--schedule"] = constant_longer["--schedule"] = "constant";
  EXPECT_EQ(run_identity_difference(constant, constant_longer), "") << "extending a constant schedule is one run";
}

TEST(RunIdentity, NewRunIdsDiffer) {
  const std::string a = new_run_id(), b = new_run_id();
  EXPECT_EQ(a.size(), 16u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace distllm
