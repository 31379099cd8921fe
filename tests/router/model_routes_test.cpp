// Weighted model splits (canary / A-B) and the router's config file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "distllm/base/error.h"
#include "distllm/router/config_file.h"
#include "distllm/router/model_routes.h"

namespace distllm::router {
namespace {

TEST(ModelRoutes, ParsesSplitFlags) {
  Splits s;
  add_split_flag(s, "chat=gpt2-v1:90,gpt2-v2:10");
  ASSERT_EQ(s.at("chat").size(), 2u);
  EXPECT_EQ(s.at("chat")[0].model, "gpt2-v1");
  EXPECT_DOUBLE_EQ(s.at("chat")[0].weight, 90);
  EXPECT_EQ(s.at("chat")[1].model, "gpt2-v2");
  add_split_flag(s, "org/model:tag=org/a:b:0.5");  // the last ':' separates the weight
  EXPECT_EQ(s.at("org/model:tag")[0].model, "org/a:b");
  for (const char* bad : {"chat", "chat=", "chat=a", "chat=a:x", "chat=a:0", "chat=a:-1", "=a:1", "x=x:1", "chat=a:1"}) {
    EXPECT_THROW(add_split_flag(s, bad), Error) << bad;
  }
}

TEST(ModelRoutes, WeightedPickFollowsTheWeights) {
  const std::vector<WeightedTarget> t = {{"a", 3}, {"b", 1}};
  EXPECT_EQ(pick_weighted(t, 0.0), "a");
  EXPECT_EQ(pick_weighted(t, 0.7499), "a");
  EXPECT_EQ(pick_weighted(t, 0.75), "b");
  EXPECT_EQ(pick_weighted(t, 0.999999), "b");
  Splits s;
  add_split(s, "alias", {{"a", 80}, {"b", 15}, {"c", 5}});
  ModelRoutes routes(s);
  std::map<std::string, int> n;
  for (int i = 0; i < 20000; ++i) ++n[routes.resolve("alias", "")];
  // Binomial standard deviations at 20,000 draws: 57, 50, 31; these bounds are 4 of them.
  EXPECT_NEAR(n["a"], 16000, 230);
  EXPECT_NEAR(n["b"], 3000, 200);
  EXPECT_NEAR(n["c"], 1000, 125);
  EXPECT_EQ(routes.resolve("other-model", ""), "other-model");
  EXPECT_EQ(routes.alias_entries().size(), 1u);
  EXPECT_EQ(routes.alias_entries()[0]["id"], "alias");
}

TEST(ModelRoutes, ASessionStaysOnOneArmAndSessionsSpreadByWeight) {
  Splits s;
  add_split(s, "chat", {{"v1", 90}, {"v2", 10}});
  ModelRoutes routes(s);
  int v2 = 0;
  for (int user = 0; user < 4000; ++user) {
    const std::string key = "user-" + std::to_string(user);
    const std::string arm = routes.resolve("chat", key);
    for (int again = 0; again < 3; ++again) ASSERT_EQ(routes.resolve("chat", key), arm);
    v2 += arm == "v2";
  }
  EXPECT_NEAR(v2, 400, 76);  // 4 standard deviations
}

TEST(RouterConfigFile, ReadsReplicasPolicyAndSplitsAndRejectsTypos) {
  const std::string path = ::testing::TempDir() + "/router_config.json";
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write(R"({"replicas": ["http://127.0.0.1:9001"], "policy": "cache_aware",
            "splits": {"chat": {"a": 90, "b": 10}}})");
  RouterConfig c;
  c.replicas = {"http://127.0.0.1:9000"};
  apply_config_file(path, c);
  EXPECT_EQ(c.replicas.size(), 2u);
  EXPECT_EQ(c.policy, "cache_aware");
  ASSERT_EQ(c.splits.at("chat").size(), 2u);
  for (const char* bad : {R"({"replica": []})", R"({"splits": {"chat": {"a": "ten"}}})", R"({"policy": 3})", "[1]",
                          "{not json"}) {
    write(bad);
    RouterConfig d;
    try {
      apply_config_file(path, d);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace distllm::router
