// Where model directories may be written, and that replacing one is atomic: a
// folder that is not a model is never emptied, a kill at any moment leaves a
// loadable model, and partial folders of dead processes are cleaned up.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/model_dir.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

class ModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_modeldir_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ModelConfig c;
    c.n_layer = 1, c.n_head = 2, c.n_embd = 16, c.vocab_size = 64, c.max_position = 16;
    c.normalize();
    model_ = std::make_unique<Transformer>(c);
    for (int64_t i = 0; i < model_->size(); ++i) model_->params()[i] = static_cast<float>(i % 7);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string path(const std::string& name) const { return join_path(root_, name); }
  float first_weight(const std::string& dir) const { return load_hf_model(dir)->params()[0]; }

  std::string root_;
  std::unique_ptr<Transformer> model_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(ModelDir, RefusesAFolderThatIsNotAModelAndKeepsItsFiles) {
  std::string data = path("data");
  fs::create_directories(data);
  write_file_atomic(join_path(data, "train.bin"), "precious");
  write_file_atomic(join_path(data, "config.json"), "{\"mine\": 1}");
  std::string e = error_of([&] { save_hf_model(*model_, data); });
  EXPECT_NE(e.find("the folder is not empty and is not a model directory written by distllm (it holds "
                   "'config.json', 'train.bin')"),
            std::string::npos)
      << e;
  EXPECT_EQ(read_file(join_path(data, "train.bin")), "precious");
  EXPECT_EQ(read_file(join_path(data, "config.json")), "{\"mine\": 1}");
  EXPECT_NE(error_of([&] { check_model_output(data, false, 0); }).find("pass --overwrite"), std::string::npos);
  // No partial folder is left behind by the refusal.
  for (const auto& entry : fs::directory_iterator(root_))
    EXPECT_EQ(entry.path().filename().string().find(".partial-"), std::string::npos) << entry.path();

  // The current directory, spelt ".", is the same folder.
  fs::path cwd = fs::current_path();
  fs::current_path(data);
  EXPECT_NE(error_of([&] { save_hf_model(*model_, "."); }).find("is not a model directory"), std::string::npos);
  EXPECT_NE(error_of([&] { check_model_output("./", false, 0); }).find("is not a model directory"),
            std::string::npos);
  fs::current_path(cwd);

  // --overwrite replaces only model files: the data stays, the model loads.
  SaveOptions o;
  o.overwrite = true;
  save_hf_model(*model_, data, o);
  EXPECT_EQ(read_file(join_path(data, "train.bin")), "precious");
  EXPECT_EQ(first_weight(data), 0.0f);
  // Saved again (now a model directory), the user's file is still kept.
  model_->params()[0] = 5.0f;
  save_hf_model(*model_, data);
  EXPECT_EQ(read_file(join_path(data, "train.bin")), "precious");
  EXPECT_EQ(first_weight(data), 5.0f);
  // A file where the folder should be.
  write_file_atomic(path("file"), "x");
  EXPECT_NE(error_of([&] { save_hf_model(*model_, path("file")); }).find("exists and is not a folder"),
            std::string::npos);
}

TEST_F(ModelDir, ReplacesItsOwnModelAndRemovesStaleShards) {
  std::string out = path("out");
  SaveOptions sharded;
  sharded.max_shard_bytes = 2000;
  save_hf_model(*model_, out, sharded);
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(out)) shards += entry.path().filename().string().rfind("model-", 0) == 0;
  EXPECT_GE(shards, 2);
  model_->params()[0] = 3.0f;
  save_hf_model(*model_, out + "/");  // a trailing slash names the same folder
  for (const auto& entry : fs::directory_iterator(out))
    EXPECT_EQ(entry.path().filename().string().rfind("model-", 0), std::string::npos) << "stale shard kept";
  EXPECT_EQ(first_weight(out), 3.0f);
  for (const auto& entry : fs::directory_iterator(root_)) EXPECT_EQ(entry.path().filename().string(), "out");
  // An empty folder is fine too.
  fs::create_directories(path("empty"));
  save_hf_model(*model_, path("empty"));
  EXPECT_EQ(first_weight(path("empty")), 3.0f);
}

TEST_F(ModelDir, RemovesPartialFoldersOfDeadProcessesOnly) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);  // its pid is now (very likely) unused
  std::string dead = path("out") + ".partial-" + std::to_string(child);
  std::string alive = path("out") + ".partial-" + std::to_string(getppid());
  fs::create_directories(dead);
  fs::create_directories(alive);
  write_file_atomic(join_path(dead, "model.safetensors"), "half");
  save_hf_model(*model_, path("out"));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));  // another process may still be writing it
}

// A writer killed at random moments while replacing a model: after every kill the
// folder holds a complete model, the old one or the new one.
TEST_F(ModelDir, AKillAtAnyMomentLeavesACompleteModel) {
  std::string out = path("out");
  save_hf_model(*model_, out);
  for (int round = 0; round < 24; ++round) {
    const float value = static_cast<float>(round + 1);
    pid_t child = fork();
    if (child == 0) {
      model_->params()[0] = value;
      for (;;) save_hf_model(*model_, out);
    }
    ASSERT_GT(child, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(300 + 397 * round % 2500));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    float w = first_weight(out);
    EXPECT_TRUE(w == value || w == static_cast<float>(round) || (round == 0 && w == 0.0f)) << w;
    model_->params()[0] = value;
    save_hf_model(*model_, out);  // also clears the killed writer's partial folder
  }
  for (const auto& entry : fs::directory_iterator(root_)) EXPECT_EQ(entry.path().filename().string(), "out");
}

TEST(ModelFileNames, CoverWhatModelDirectoriesHold) {
  for (const char* n : {"config.json", "model.safetensors", "model-00001-of-00003.safetensors", "tokenizer.json",
                        "model.safetensors.index.json", kModelDirMarker})
    EXPECT_TRUE(is_model_file_name(n)) << n;
  for (const char* n : {"train.bin", "data", "model-1-of-3.safetensors", "notes.txt", "config.json.bak"})
    EXPECT_FALSE(is_model_file_name(n)) << n;
}

}  // namespace
}  // namespace distllm
