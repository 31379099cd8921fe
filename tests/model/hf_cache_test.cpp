// `--model` spellings of the Hugging Face hub cache: a models--ORG--NAME folder, an
// ORG/NAME id looked up in HF_HUB_CACHE, and the snapshot refs/main names — with
// the model then loading from the snapshot whose files are links into blobs/.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_cache.h"
#include "distllm/model/hf_checkpoint.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

class HfCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_hfcache_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    saved_cache_ = getenv("HF_HUB_CACHE") ? getenv("HF_HUB_CACHE") : "";
    setenv("HF_HUB_CACHE", (root_ / "hub").c_str(), 1);
  }
  void TearDown() override {
    if (saved_cache_.empty()) unsetenv("HF_HUB_CACHE");
    else setenv("HF_HUB_CACHE", saved_cache_.c_str(), 1);
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // A real model saved, then laid out as the hub does: blobs/ holds the files under
  // hash-like names, snapshots/<commit>/ links to them, refs/main names the commit.
  fs::path cached_model(const std::string& org, const std::string& name, const std::string& commit,
                        bool with_ref = true) {
    ModelConfig c;
    c.n_layer = 1, c.n_head = 2, c.n_embd = 16, c.vocab_size = 64, c.max_position = 16;
    c.normalize();
    Transformer model(c);
    for (int64_t i = 0; i < model.size(); ++i) model.params()[i] = 0.25f * static_cast<float>(i % 5);
    const fs::path saved = root_ / ("saved-" + commit);
    save_hf_model(model, saved.string());
    const fs::path cache = root_ / "hub" / ("models--" + org + "--" + name);
    fs::create_directories(cache / "blobs");
    fs::create_directories(cache / "snapshots" / commit);
    int n = 0;
    for (const auto& e : fs::directory_iterator(saved)) {
      const fs::path blob = cache / "blobs" / (commit + "-" + std::to_string(n++));
      fs::copy_file(e.path(), blob);
      fs::create_symlink(fs::relative(blob, cache / "snapshots" / commit), cache / "snapshots" / commit / e.path().filename());
    }
    if (with_ref) {
      fs::create_directories(cache / "refs");
      std::ofstream(cache / "refs" / "main") << commit;  // the hub writes it without a newline
    }
    return cache;
  }
  fs::path root_;
  std::string saved_cache_;
};

TEST_F(HfCache, CacheFolderAndIdResolveToTheSnapshotRefsMainNames) {
  const fs::path cache = cached_model("acme", "tiny-1B", "0123abcd");
  const std::string snapshot = (cache / "snapshots" / "0123abcd").string();
  EXPECT_EQ(resolve_model_dir(cache.string()), snapshot);
  EXPECT_EQ(resolve_model_dir("acme/tiny-1B"), snapshot);
  EXPECT_EQ(resolve_model_dir(snapshot), snapshot) << "a model directory is itself";
  // The snapshot's links into blobs/ load as a model.
  EXPECT_FLOAT_EQ(load_hf_model(resolve_model_dir("acme/tiny-1B"))->params()[1], 0.25f);
  // A second download moves refs/main; the older snapshot stays on disk.
  cached_model("acme", "tiny-1B", "4567ef01");
  EXPECT_EQ(resolve_model_dir("acme/tiny-1B"), (cache / "snapshots" / "4567ef01").string());
}

TEST_F(HfCache, ServedNameIsWhatTheUserMeant) {
  const fs::path cache = cached_model("acme", "tiny-1B", "0123abcd");
  EXPECT_EQ(default_served_model_name("acme/tiny-1B"), "acme/tiny-1B");
  EXPECT_EQ(default_served_model_name(cache.string()), "acme/tiny-1B");
  EXPECT_EQ(default_served_model_name(cache.string() + "/"), "acme/tiny-1B");
  EXPECT_EQ(default_served_model_name((root_ / "saved-0123abcd").string()), "saved-0123abcd");
}

TEST_F(HfCache, OneSnapshotWithoutRefsIsTakenSeveralAreRefused) {
  const fs::path cache = cached_model("acme", "norefs", "aaaa", /*with_ref=*/false);
  EXPECT_EQ(resolve_model_dir(cache.string()), (cache / "snapshots" / "aaaa").string());
  cached_model("acme", "norefs", "bbbb", /*with_ref=*/false);
  try {
    resolve_model_dir("acme/norefs");
    FAIL() << "two snapshots and no refs/main resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("several snapshots"), std::string::npos) << e.what();
  }
}

TEST_F(HfCache, BrokenCachesAndMissingIdsAreNamed) {
  const fs::path cache = cached_model("acme", "broken", "cccc");
  std::ofstream(cache / "refs" / "main", std::ios::trunc) << "dddd";
  try {
    resolve_model_dir(cache.string());
    FAIL() << "refs/main naming a missing snapshot resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names snapshot dddd"), std::string::npos) << e.what();
  }
  try {
    resolve_model_dir("nobody/nothing");
    FAIL() << "an id that is not cached resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("models--nobody--nothing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nothing is downloaded"), std::string::npos) << e.what();
  }
  // What is neither a directory nor an id goes on unchanged, for the loader to name.
  EXPECT_EQ(resolve_model_dir("/no/such/dir"), "/no/such/dir");
  EXPECT_EQ(resolve_model_dir("plainname"), "plainname");
}

}  // namespace
}  // namespace distllm
