// The change detector behind `distllm serve --watch` (serve/model_watch.h): no
// reload for an unchanged directory, one after an atomic replace (once seen twice),
// none for a partial write, a missing shard or a marker that lists a missing file.
#include "distllm/serve/model_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "distllm/model/hf_checkpoint.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm::serve {
namespace {

namespace fs = std::filesystem;

class ReloadDetector : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("distllm_watch_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = (root_ / "model").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  void write_model(uint64_t seed, uint64_t max_shard_bytes = 0) {
    ModelConfig c;
    c.family = ModelFamily::kGpt2;
    c.vocab_size = 256;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_kv_head = 2;
    c.n_embd = 16;
    c.max_position = 32;
    c.normalize();
    Transformer m(c);
    m.init_weights(seed);
    SaveOptions opt;
    opt.max_shard_bytes = max_shard_bytes;
    opt.extra_files["tokenizer.json"] = Tokenizer::byte_level().to_json();
    save_hf_model(m, dir_, opt);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_in_place(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
  }

  fs::path root_;
  std::string dir_;
};

TEST_F(ReloadDetector, UnchangedDirectoryNeverReloads) {
  write_model(1);
  ModelDirState st = inspect_model_dir(dir_);
  ASSERT_TRUE(st.complete) << st.problem;
  ModelChangeDetector d(dir_, st.signature);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(d.poll());
  // A file that is not part of the model changes nothing.
  write_in_place(path("notes.txt"), "hello");
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(d.poll());
  EXPECT_EQ(inspect_model_dir(dir_).signature, st.signature);
}

TEST_F(ReloadDetector, AtomicReplaceReloadsOnceStable) {
  write_model(1);
  ModelChangeDetector d(dir_, inspect_model_dir(dir_).signature);
  EXPECT_FALSE(d.poll());
  write_model(2);  // save_hf_model: built beside, exchanged in one rename
  ModelDirState now = inspect_model_dir(dir_);
  ASSERT_TRUE(now.complete) << now.problem;
  EXPECT_FALSE(d.poll()) << "a new state must be seen twice";
  ASSERT_TRUE(d.poll());
  EXPECT_EQ(d.candidate(), now.signature);
  d.set_loaded(d.candidate());
  EXPECT_FALSE(d.poll());
  EXPECT_FALSE(d.poll());
  // And again for the next write.
  write_model(3);
  EXPECT_FALSE(d.poll());
  EXPECT_TRUE(d.poll());
}

TEST_F(ReloadDetector, FirstPollAfterStartNeedsAStableState) {
  write_model(1);
  // The serving model was read from a state before this one: a change that
  // happened during the initial load is picked up, after two looks.
  ModelChangeDetector d(dir_, "an older state");
  EXPECT_FALSE(d.poll());
  EXPECT_TRUE(d.poll());
}

TEST_F(ReloadDetector, PartialWriteIsNeverTaken) {
  write_model(1);
  ModelChangeDetector d(dir_, inspect_model_dir(dir_).signature);
  const std::string full = read(path("model.safetensors"));
  ASSERT_GT(full.size(), 1000u);
  // A writer filling the weights in place: cut short, at several points (the
  // header only, half the data, all but one byte). However long it stays so, it is
  // not loaded.
  for (size_t cut : {size_t{6}, full.size() / 2, full.size() - 1}) {
    write_in_place(path("model.safetensors"), full.substr(0, cut));
    ModelDirState st = inspect_model_dir(dir_);
    EXPECT_FALSE(st.complete) << cut;
    EXPECT_NE(st.problem.find("model.safetensors"), std::string::npos) << st.problem;
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(d.poll()) << cut;
  }
  // A file that grows between polls is not taken either (even when complete at a
  // poll: here it is rewritten, with a new time, before every poll).
  for (int i = 0; i < 3; ++i) {
    write_in_place(path("model.safetensors"), full);
    fs::last_write_time(path("model.safetensors"), fs::file_time_type::clock::now() + std::chrono::seconds(i + 1));
    EXPECT_FALSE(d.poll());
  }
  // Once it stays complete, it is taken (these bytes are the loaded model's, but the
  // file is a new one: a reload of the same weights is harmless).
  EXPECT_TRUE(d.poll());
}

TEST_F(ReloadDetector, ConfigNotYetWritten) {
  write_model(1);
  ModelChangeDetector d(dir_, inspect_model_dir(dir_).signature);
  write_in_place(path("config.json"), "{\"model_type\": \"gp");
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(d.poll());
  EXPECT_NE(d.problem().find("config.json"), std::string::npos) << d.problem();
  fs::remove(path("config.json"));
  EXPECT_FALSE(inspect_model_dir(dir_).complete);
  EXPECT_FALSE(d.poll());
}

TEST_F(ReloadDetector, MissingShardOrMarkedFileIsIncomplete) {
  write_model(1, /*max_shard_bytes=*/4096);
  ModelDirState st = inspect_model_dir(dir_);
  ASSERT_TRUE(st.complete) << st.problem;
  ASSERT_TRUE(fs::exists(path("model.safetensors.index.json")));
  ModelChangeDetector d(dir_, st.signature);
  // A shard the index names is not there yet (in a directory without the distllm
  // marker, as other tools write them: the index alone says what is missing).
  fs::rename(path(".distllm-model"), (root_ / "marker").string());
  std::string shard;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("model-00001-of-", 0) == 0) shard = e.path().string();
  ASSERT_FALSE(shard.empty());
  fs::rename(shard, (root_ / "aside").string());
  st = inspect_model_dir(dir_);
  EXPECT_FALSE(st.complete);
  EXPECT_NE(st.problem.find("index names"), std::string::npos) << st.problem;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(d.poll());
  fs::rename((root_ / "aside").string(), shard);
  fs::rename((root_ / "marker").string(), path(".distllm-model"));
  // The marker lists a file that is missing (tokenizer.json).
  fs::rename(path("tokenizer.json"), (root_ / "tok").string());
  st = inspect_model_dir(dir_);
  EXPECT_FALSE(st.complete);
  EXPECT_NE(st.problem.find("marker"), std::string::npos) << st.problem;
  EXPECT_FALSE(d.poll());
  fs::rename((root_ / "tok").string(), path("tokenizer.json"));
  // Everything back as it was: the loaded state, no reload.
  EXPECT_FALSE(d.poll());
  EXPECT_FALSE(d.poll());
}

TEST_F(ReloadDetector, CheckpointDirectory) {
  const std::string ck = (root_ / "ck").string();
  fs::create_directories(ck);
  ModelChangeDetector d(ck, inspect_checkpoint_dir(ck).signature, WatchedKind::kCheckpointDir);
  EXPECT_FALSE(inspect_checkpoint_dir(ck).complete);
  EXPECT_FALSE(d.poll());
  // A save in progress is never named by `latest`; `latest` naming a step whose
  // manifest is missing is not complete either.
  fs::create_directories(fs::path(ck) / ".partial-step_00000010");
  write_in_place((fs::path(ck) / "latest").string(), "step_00000010\n");
  EXPECT_FALSE(inspect_checkpoint_dir(ck).complete);
  EXPECT_FALSE(d.poll());
  EXPECT_FALSE(d.poll());
  // The step renamed into place, then `latest` (already naming it): taken once stable.
  fs::rename(fs::path(ck) / ".partial-step_00000010", fs::path(ck) / "step_00000010");
  write_in_place((fs::path(ck) / "step_00000010" / "manifest.json").string(), "{}");
  ModelDirState st = inspect_checkpoint_dir(ck);
  ASSERT_TRUE(st.complete) << st.problem;
  EXPECT_NE(st.signature.find("step_00000010"), std::string::npos);
  EXPECT_FALSE(d.poll());
  ASSERT_TRUE(d.poll());
  d.set_loaded(d.candidate());
  EXPECT_FALSE(d.poll());
  // The next step.
  fs::create_directories(fs::path(ck) / "step_00000020");
  write_in_place((fs::path(ck) / "step_00000020" / "manifest.json").string(), "{}");
  EXPECT_FALSE(d.poll()) << "latest still names step 10";
  write_in_place((fs::path(ck) / "latest").string(), "step_00000020\n");
  EXPECT_FALSE(d.poll());
  EXPECT_TRUE(d.poll());
  // `latest` must name a step inside the directory.
  write_in_place((fs::path(ck) / "latest").string(), "../elsewhere\n");
  EXPECT_FALSE(inspect_checkpoint_dir(ck).complete);
}

TEST_F(ReloadDetector, NotADirectory) {
  ModelDirState st = inspect_model_dir((root_ / "absent").string());
  EXPECT_FALSE(st.complete);
  EXPECT_TRUE(st.signature.empty());
  ModelChangeDetector d((root_ / "absent").string(), "x");
  EXPECT_FALSE(d.poll());
  EXPECT_FALSE(d.poll());
}

}  // namespace
}  // namespace distllm::serve
