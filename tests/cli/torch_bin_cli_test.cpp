// `distllm convert --hf DIR --to-hf OUT` turns a pytorch_model.bin directory into a
// safetensors one with the same weights, and `distllm bench checkpoint --torch-bin`
// prints both formats' load times and their ratio.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli/run_command.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"
#include "model/torch_runner.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

class TorchBinCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_torchbin_cli_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ModelConfig c;
    c.family = ModelFamily::kLlama;
    c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.vocab_size = 64, c.max_position = 16;
    c.normalize();
    Transformer m(c);
    m.init_weights(3);
    save_hf_model(m, st());
    ASSERT_EQ(testing::run_reference("torch_bin.py", "model " + st() + " " + bin() + " --shards 2"), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string st() const { return join_path(dir_, "st"); }
  std::string bin() const { return join_path(dir_, "bin"); }
  std::string dir_;
};

TEST_F(TorchBinCli, ConvertWritesSafetensorsWithTheSameWeights) {
  const std::string out = join_path(dir_, "out");
  auto r = testing::run_distllm("convert --hf " + bin() + " --to-hf " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(file_exists(join_path(out, "model.safetensors"))) << r.output;
  EXPECT_FALSE(file_exists(join_path(out, "pytorch_model.bin.index.json")));
  auto a = load_hf_model(st()), b = load_hf_model(out);
  ASSERT_EQ(a->size(), b->size());
  for (int64_t i = 0; i < a->size(); ++i) ASSERT_EQ(a->params()[i], b->params()[i]) << i;
}

TEST_F(TorchBinCli, BenchComparesLoadTimes) {
  auto r = testing::run_distllm("bench checkpoint --torch-bin " + bin() + " --repeats 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pytorch_model.bin / safetensors = "), std::string::npos) << r.output;
  r = testing::run_distllm("bench checkpoint --torch-bin " + st() + " --repeats 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no pytorch_model.bin"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace distllm
