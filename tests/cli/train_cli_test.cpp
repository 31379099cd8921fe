// `distllm train` end to end: it trains, saves a loadable model, and every kind of
// bad input is a clear message with a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli/run_command.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/train/token_file.h"

namespace distllm {
namespace {

using testing::run_distllm;

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_cli_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::string text;
    for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
    write_file_atomic(path("text.txt"), text);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& n) const { return join_path(dir_, n); }
  std::string dir_;
};

const char* kTinyModel = "--family llama --n-layer 2 --n-head 4 --n-kv-head 2 --n-embd 32 --max-seq 64";

TEST_F(TrainCli, TrainsAndSavesALoadableModel) {
  auto r = run_distllm(std::string("train --text ") + path("text.txt") + " " + kTinyModel +
                       " --batch 4 --seq 32 --steps 12 --lr 3e-3 --warmup 2 --eval-every 6 --threads 2 --out " +
                       path("model"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step    12/12 | loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eval      6 | val loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos);
  auto model = load_hf_model(path("model"));
  EXPECT_EQ(model->config().vocab_size, 256);
  EXPECT_EQ(model->config().n_kv_head, 2);
}

TEST_F(TrainCli, SameSeedSameLosses) {
  std::string cmd = std::string("train --text ") + path("text.txt") + " " + kTinyModel +
                    " --batch 2 --seq 16 --steps 5 --threads 2 --seed 9";
  auto a = run_distllm(cmd), b = run_distllm(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto losses = [](const std::string& out) {
    std::string s;
    size_t pos = 0;
    while ((pos = out.find("| loss ", pos)) != std::string::npos) {
      s += out.substr(pos, 14);
      pos += 7;
    }
    return s;
  };
  EXPECT_EQ(losses(a.output), losses(b.output));
  EXPECT_FALSE(losses(a.output).empty());
}

struct BadCase {
  const char* args;
  const char* message;
};

TEST_F(TrainCli, BadInputNamesTheProblem) {
  std::vector<uint32_t> toks(500, 3);
  toks[10] = 60000;
  write_token_file(path("big_ids.tok"), toks, 65536);
  std::vector<uint32_t> fine(500, 7);
  write_token_file(path("fine.tok"), fine, 256);
  std::string bytes = read_file(path("fine.tok"));
  write_file_atomic(path("truncated.tok"), bytes.substr(0, bytes.size() - 5));
  std::string t = " --text " + path("text.txt");
  const BadCase cases[] = {
      {"--preset gpt2-tiny --n-head 5", "error: n_head (5) must divide n_embd (384)"},
      {"--family llama --n-head 6 --n-kv-head 4", "error: n_kv_head (4) must divide n_head (6)"},
      {"--n-layer -2", "error: --n-layer must be positive, got -2"},
      {"--preset gpt9", "error: unknown model preset 'gpt9'"},
      {"--bach 8", "error: unknown flag --bach for 'distllm train' (see --help)"},
      {"--batch eight", "error: --batch expects an integer, got 'eight'"},
      {"--lr -1", "error: learning rate must be positive, got -1"},
      {"--seq 4096 --preset gpt2-tiny", "error: sequence length 4096 exceeds the model's context (1024)"},
  };
  for (const auto& c : cases) {
    auto r = run_distllm(std::string("train") + t + " --steps 1 " + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
  auto missing = run_distllm("train --data " + path("nope.tok") + " --steps 1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("error: " + path("nope.tok") + ": no such token file or directory"),
            std::string::npos) << missing.output;
  auto trunc = run_distllm("train --data " + path("truncated.tok") + " --steps 1");
  EXPECT_EQ(trunc.exit_code, 1);
  EXPECT_NE(trunc.output.find("truncated?"), std::string::npos) << trunc.output;
  auto big = run_distllm("train --data " + path("big_ids.tok") + " --steps 1 " + kTinyModel + " --vocab-size 1000 --seq 8");
  EXPECT_EQ(big.exit_code, 1);
  EXPECT_NE(big.output.find("token id 60000 is outside the model's vocabulary of 1000"), std::string::npos)
      << big.output;
  auto none = run_distllm("train --steps 1");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.output.find("no training data"), std::string::npos);
  auto unknown = run_distllm("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command 'frobnicate'"), std::string::npos);
}

TEST_F(TrainCli, DivergenceStopsWithAMessage) {
  // An absurd learning rate makes the loss blow up; the run must stop, not print NaNs.
  auto r = run_distllm(std::string("train --text ") + path("text.txt") + " " + kTinyModel +
                       " --batch 2 --seq 16 --steps 40 --lr 1e6 --clip 0 --schedule constant --threads 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("training diverged"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("loss nan"), std::string::npos);
}

}  // namespace
}  // namespace distllm
