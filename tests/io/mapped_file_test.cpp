// A file that shrinks or is rewritten under its mapping never crashes the process:
// the read that faults past the new end completes (with zeros) and changed() says so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"

namespace distllm {
namespace {

std::string temp_file(const std::string& content) {
  char tmpl[] = "/tmp/distllm_mapped_XXXXXX";
  const int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::close(fd);
  return tmpl;
}

TEST(MappedFile, TruncatedUnderTheMappingIsSeenNotFatal) {
  const std::string content(1 << 20, 'x');  // 256 pages
  const std::string path = temp_file(content);
  MappedFile m(path);
  ASSERT_EQ(m.size(), content.size());
  EXPECT_EQ(m.data()[4096], 'x');
  EXPECT_FALSE(m.changed());
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);  // what `cp` over the file does first
  // Reading past the new end raised SIGBUS; now the read returns and the file is
  // reported changed.
  long sum = 0;
  for (size_t i = 0; i < m.size(); i += 4096) sum += m.data()[i];
  EXPECT_EQ(m.data()[0], 'x');
  EXPECT_EQ(m.data()[m.size() - 1], 0);
  EXPECT_GT(sum, 0);
  EXPECT_TRUE(m.changed());
  EXPECT_THROW(m.check_unchanged("a test tensor"), Error);
  std::filesystem::remove(path);
}

TEST(MappedFile, RewrittenInPlaceIsChangedButReplacedByRenameIsNot) {
  const std::string path = temp_file(std::string(8192, 'a'));
  MappedFile in_place(path);
  ::usleep(20000);  // a distinct modification time
  {
    FILE* f = std::fopen(path.c_str(), "r+");
    ASSERT_NE(f, nullptr);
    std::fputs("b", f);
    std::fclose(f);
  }
  EXPECT_TRUE(in_place.changed());
  try {
    in_place.check_unchanged("the weights");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + " changed while the weights was being read"), std::string::npos)
        << e.what();
  }
  MappedFile renamed(path);
  const std::string other = temp_file(std::string(100, 'c'));
  std::filesystem::rename(other, path);  // an atomic replacement: the mapping keeps the old file whole
  EXPECT_FALSE(renamed.changed());
  EXPECT_EQ(renamed.data()[8191], 'a');
  std::filesystem::remove(path);
}

TEST(MappedFileDeathTest, AFaultOutsideEveryMappingStillCrashes) {
  // The guard answers only for its own mappings: a genuine bug is not hidden.
  MappedFile keep(temp_file("x"));
  EXPECT_DEATH(::raise(SIGBUS), "");
}

}  // namespace
}  // namespace distllm
