#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/train/dataset.h"
#include "distllm/train/token_file.h"

namespace distllm {
namespace {

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_train_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return join_path(dir_, name); }
  std::string dir_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using TokenFiles = TempDir;

TEST_F(TokenFiles, RoundTripBothWidths) {
  std::vector<uint32_t> small = {0, 1, 255, 65535, 7};
  write_token_file(path("a.tok"), small, 65536);
  TokenFile a(path("a.tok"));
  EXPECT_EQ(a.token_bytes(), 2u);
  EXPECT_EQ(a.size(), small.size());
  EXPECT_EQ(a.vocab_size(), 65536u);
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(a.at(i), small[i]);
  EXPECT_EQ(a.max_token(), 65535u);
  EXPECT_EQ(std::filesystem::file_size(path("a.tok")), 32u + 2 * small.size());

  std::vector<uint32_t> big = {70000, 3, 128000};
  write_token_file(path("b.tok"), big, 128256);
  TokenFile b(path("b.tok"));
  EXPECT_EQ(b.token_bytes(), 4u);
  std::vector<int32_t> out(3);
  b.read(0, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{70000, 3, 128000}));
  EXPECT_THROW(b.read(2, 2, out.data()), Error);
  EXPECT_THROW(write_token_file(path("c.tok"), big, 50000), Error);  // 70000 does not fit 16 bits
}

TEST_F(TokenFiles, RejectsDamagedFilesNamingTheProblem) {
  std::vector<uint32_t> toks(100, 5);
  write_token_file(path("ok.tok"), toks, 256);
  std::string bytes = read_file(path("ok.tok"));

  write_file_atomic(path("trunc.tok"), bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(error_of([&] { TokenFile f(path("trunc.tok")); }),
            path("trunc.tok") + ": header says 100 tokens (200 bytes) but the file holds 197 bytes of tokens (truncated?)");
  write_file_atomic(path("short.tok"), bytes.substr(0, 10));
  EXPECT_EQ(error_of([&] { TokenFile f(path("short.tok")); }),
            path("short.tok") + ": truncated token file: 10 bytes, the header alone needs 32");
  std::string bad = bytes;
  bad[0] = 'X';
  write_file_atomic(path("magic.tok"), bad);
  EXPECT_EQ(error_of([&] { TokenFile f(path("magic.tok")); }),
            path("magic.tok") + ": not a distllm token file (bad magic; expected \"DLTK\")");
  bad = bytes;
  bad[4] = 9;
  write_file_atomic(path("version.tok"), bad);
  EXPECT_EQ(error_of([&] { TokenFile f(path("version.tok")); }),
            path("version.tok") + ": unsupported token file version 9 (expected 1)");
  bad = bytes;
  bad[8] = 3;
  write_file_atomic(path("width.tok"), bad);
  EXPECT_EQ(error_of([&] { TokenFile f(path("width.tok")); }),
            path("width.tok") + ": token width 3 bytes is invalid (must be 2 or 4)");
  bad = bytes;
  for (int i = 16; i < 24; ++i) bad[i] = static_cast<char>(0xff);  // count 2^64-1
  write_file_atomic(path("count.tok"), bad);
  EXPECT_NE(error_of([&] { TokenFile f(path("count.tok")); }).find("header says 18446744073709551615 tokens"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { TokenFile f(path("missing.tok")); }),
            path("missing.tok") + ": cannot open: No such file or directory");
}

using Datasets = TempDir;

TEST_F(Datasets, WindowsStayInsideShardsAndSamplerIsReproducible) {
  std::vector<uint32_t> a(50), b(30);
  for (uint32_t i = 0; i < 50; ++i) a[i] = i;
  for (uint32_t i = 0; i < 30; ++i) b[i] = 1000 + i;
  write_token_file(path("train_00000.tok"), a, 2000);
  write_token_file(path("train_00001.tok"), b, 2000);
  write_token_file(path("val_00000.tok"), b, 2000);
  TokenDataset d = TokenDataset::open(dir_, "train");
  EXPECT_EQ(d.size(), 80u);
  EXPECT_EQ(d.num_shards(), 2u);
  EXPECT_EQ(d.num_windows(8), (50u - 8) + (30u - 8));
  std::vector<int32_t> w(9);
  d.window(42, 8, w.data());  // the first window of the second shard
  EXPECT_EQ(w[0], 1000);
  EXPECT_EQ(w[8], 1008);
  for (uint64_t k = 0; k < d.num_windows(8); ++k) {
    d.window(k, 8, w.data());
    for (int i = 1; i < 9; ++i) EXPECT_EQ(w[i], w[i - 1] + 1) << "window " << k << " crosses a shard boundary";
  }

  BatchSampler s1(d, 4, 8, 42), s2(d, 4, 8, 42), other(d, 4, 8, 43);
  std::vector<int32_t> t1(32), y1(32), t2(32), y2(32), t3(32), y3(32);
  bool any_difference = false;
  for (int step = 0; step < 5; ++step) {
    s1.next(t1.data(), y1.data());
    s2.next(t2.data(), y2.data());
    other.next(t3.data(), y3.data());
    EXPECT_EQ(t1, t2);
    EXPECT_EQ(y1, y2);
    any_difference |= t1 != t3;
    for (int i = 0; i < 32; ++i)
      if (i % 8 != 7) {
        EXPECT_EQ(y1[i], t1[i + 1]);  // targets are tokens shifted by one
      }
  }
  EXPECT_TRUE(any_difference);
  // Restoring the position reproduces the continuation exactly.
  BatchSampler resumed(d, 4, 8, 42);
  resumed.set_position(s1.position());
  s1.next(t1.data(), y1.data());
  resumed.next(t2.data(), y2.data());
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(s1.position(), 6u);

  TokenDataset val = TokenDataset::open(dir_, "val");
  EXPECT_EQ(val.size(), 30u);
  EXPECT_THROW(d.check_tokens_below(1010), Error);
  d.check_tokens_below(1030);
  EXPECT_THROW(BatchSampler(d, 1, 60, 1), Error);  // no shard holds 61 tokens
}

TEST_F(Datasets, RanksDrawDifferentSamples) {
  std::vector<uint32_t> a(1000);
  for (uint32_t i = 0; i < 1000; ++i) a[i] = i;
  TokenDataset d = TokenDataset::from_tokens(a, 1000, "mem");
  BatchSampler r0(d, 2, 16, 7, 0, 2), r1(d, 2, 16, 7, 1, 2);
  std::vector<int32_t> t0(32), y0(32), t1(32), y1(32);
  r0.next(t0.data(), y0.data());
  r1.next(t1.data(), y1.data());
  EXPECT_NE(t0, t1);
}

}  // namespace
}  // namespace distllm
