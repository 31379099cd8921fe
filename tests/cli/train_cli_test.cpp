// `distllm train` end to end: it trains, saves a loadable model, and every kind of
// bad input is a clear message with a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/train/dataset.h"
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

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) lines.push_back(text.substr(at, nl - at));
  return lines;
}

const char* kTinyModel = "--family llama --n-layer 2 --n-head 4 --n-kv-head 2 --n-embd 32 --max-seq 64";

TEST_F(TrainCli, TrainsAndSavesALoadableModel) {
  auto r = run_distllm(std::string("train --text ") + path("text.txt") + " " + kTinyModel +
                       " --batch 4 --seq 32 --steps 12 --lr 3e-3 --warmup 2 --eval-every 6 --threads 2 --out " +
                       path("model"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step    12/12 | loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eval      6 | val loss "), std::string::npos) << r.output;
  // Byte-level tokens: bits per byte is the loss in bits.
  double loss = 0, bpb = 0;
  const size_t at = r.output.find("eval      6 | val loss ");
  ASSERT_EQ(std::sscanf(r.output.c_str() + at, "eval      6 | val loss %lf (%lf bits/byte)", &loss, &bpb), 2) << r.output;
  EXPECT_NEAR(bpb, loss / std::log(2.0), 1e-4);
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
      {"--bach 8", "error: unknown flag --bach for 'distllm train'; did you mean --batch? (see --help)"},
      {"--batch eight", "error: --batch expects an integer, got 'eight'"},
      {"--lr -1", "error: learning rate must be positive, got -1"},
      {"--seq 4096 --preset gpt2-tiny", "error: sequence length 4096 exceeds the model's context (1024)"},
      // Sizes are checked before anything is allocated: by their bounds, then by
      // the memory the run needs (a tiny model with a huge batch).
      {"--batch 3000000000", "error: --batch = 3000000000 is larger than the maximum 1048576"},
      {"--grad-accum 1000000000", "error: --grad-accum = 1000000000 is larger than the maximum 65536"},
      {"--eval-batches 1000000000", "error: --eval-batches = 1000000000 is larger than the maximum 1048576"},
      {"--batch 0", "error: --batch must be at least 1, got 0"},
      {"--batch 100000 --seq 64 --memory-gb 8", "GB per rank (parameters"},
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
  // An error raised before every flag was read still points at the typo.
  auto typo = run_distllm("train --dta " + path("fine.tok") + " --steps 1");
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_NE(typo.output.find("note: --dta is not a flag of 'distllm train'; did you mean --data?"), std::string::npos)
      << typo.output;
  // Help shows each default once, and a sentinel default as its help explains it.
  auto help = run_distllm("train --help");
  for (const std::string& line : split_lines(help.output)) {
    const size_t first = line.find("default");
    EXPECT_TRUE(first == std::string::npos || line.find("default", first + 1) == std::string::npos) << line;
  }
  EXPECT_EQ(help.output.find("(default: -1)"), std::string::npos) << help.output;
  auto unknown = run_distllm("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command 'frobnicate'"), std::string::npos);
}

// A prepared data folder that does not hold together is refused by name; a binary
// file given to `data prepare` is warned about.
TEST_F(TrainCli, DataFoldersThatDoNotHoldTogetherAreRefused) {
  auto prep = run_distllm("data prepare --tokenizer bytes --val-fraction 0.2 --doc-separator '\\n' --input " + path("text.txt") + " --out " +
                          path("data"));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  // The manifest records each split's text bytes, for bits per byte.
  const TokenDataset train_split = TokenDataset::open(path("data"), "train");
  const TokenDataset val_split = TokenDataset::open(path("data"), "val");
  const auto text_size = static_cast<uint64_t>(std::filesystem::file_size(path("text.txt")));
  EXPECT_GT(train_split.text_bytes(), 0u);
  EXPECT_GT(val_split.text_bytes(), 0u);
  EXPECT_LE(train_split.text_bytes() + val_split.text_bytes(), text_size);
  EXPECT_GE(train_split.text_bytes() + val_split.text_bytes(), text_size * 9 / 10) << "separators only are dropped";
  EXPECT_DOUBLE_EQ(val_split.bits_per_byte(std::log(2.0)),
                   static_cast<double>(val_split.size()) / static_cast<double>(val_split.text_bytes()));
  ASSERT_EQ(run_distllm("train --data " + path("data") + " --steps 1 " + kTinyModel + " --batch 1 --seq 8").exit_code, 0);
  // A train shard from another tokenizer (a 1000-token vocabulary) under the manifest's 256.
  std::filesystem::copy(path("data"), path("mixed"), std::filesystem::copy_options::recursive);
  std::vector<uint32_t> ids(400, 5);
  ids[3] = 700;
  write_token_file(path("mixed/train_00000.tok"), ids, 1000);
  auto mixed = run_distllm("train --data " + path("mixed") + " --steps 1 " + kTinyModel + " --batch 1 --seq 8");
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_NE(mixed.output.find("written for a vocabulary of 1000 tokens, but " + path("mixed/manifest.json") +
                              " says 256"),
            std::string::npos)
      << mixed.output;
  // The manifest names a validation shard that is missing.
  std::filesystem::copy(path("data"), path("noval"), std::filesystem::copy_options::recursive);
  std::filesystem::remove(path("noval/val_00000.tok"));
  auto noval = run_distllm("train --data " + path("noval") + " --steps 1 " + kTinyModel + " --batch 1 --seq 8");
  EXPECT_EQ(noval.exit_code, 1);
  EXPECT_NE(noval.output.find("the 'val' shard val_00000.tok it lists is missing"), std::string::npos) << noval.output;
  // A binary file is tokenized, with a warning.
  auto binary = run_distllm("data prepare --tokenizer bytes --input /bin/ls --out " + path("binary"));
  EXPECT_EQ(binary.exit_code, 0) << binary.output;
  EXPECT_NE(binary.output.find("warning: /bin/ls looks like a binary file"), std::string::npos) << binary.output;
  auto text = run_distllm("data prepare --tokenizer bytes --input " + path("text.txt") + " --out " + path("text"));
  EXPECT_EQ(text.output.find("binary"), std::string::npos) << text.output;
}

// --time-limit ends the run saying so, with a summary, and the learning rate has
// decayed to its minimum when the time is up (the schedule follows the clock too).
TEST_F(TrainCli, TimeLimitSaysWhyAndTheScheduleEndsOnTime) {
  auto r = run_distllm(std::string("train --text ") + path("text.txt") + " " + kTinyModel +
                       " --batch 2 --seq 16 --steps 1000000 --time-limit 1.5 --lr 1e-3 --log-every 100000 --threads 1"
                       " --metrics-file " + path("m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("done: stopped after step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" of 1000000: the --time-limit of 1.5 s was reached: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("metrics: " + path("m.jsonl")), std::string::npos) << r.output;
  // The last step's learning rate is the minimum (lr / 10), though far fewer than
  // --steps ran.
  std::string last_step;
  for (const std::string& line : split_lines(read_file(path("m.jsonl"))))
    if (line.find("\"type\":\"step\"") != std::string::npos) last_step = line;
  const size_t lr = last_step.find("\"lr\":");
  ASSERT_NE(lr, std::string::npos) << last_step;
  EXPECT_NEAR(std::stod(last_step.substr(lr + 5)), 1e-4, 1e-12) << last_step;
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
