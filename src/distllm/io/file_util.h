// File helpers: whole-file reads, atomic writes, read-only memory maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <functional>
#include <string_view>

namespace distllm {

std::string read_file(const std::string& path);

// Writes `data` to `path` so that readers see either the old file or the complete
// new one: write to a temporary in the same directory, fsync, rename, fsync the dir.
void write_file_atomic(const std::string& path, std::string_view data);

// As above, for writers that stream: fn(fd) writes the content to the temporary.
void write_file_atomic_with(const std::string& path, const std::function<void(int fd)>& fn);

// Writes all of [data, data+size) to fd or throws naming `path`.
void write_all(int fd, const void* data, size_t size, const std::string& path);

// fsync of a directory, so that renames and creations in it are durable.
void fsync_directory(const std::string& dir);

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_directories(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);

// A read-only private mapping of a whole file (empty files map to an empty view).
// A file rewritten or truncated in place while mapped never crashes the process
// (mapping_guard.h); changed() then says the bytes read may not be the file's.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True when the file was modified in place since it was mapped (its size or
  // modification time changed, or a read faulted past its new end). A file replaced
  // by a rename is not: the mapping still holds the old one, whole.
  bool changed() const;
  // Throws "PATH changed while it was being read (...)" when changed(); `what` says
  // what was being read.
  void check_unchanged(const char* what) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int guard_ = -1;  // mapping_guard slot
  uint64_t dev_ = 0, ino_ = 0;
  int64_t mtime_ns_ = 0;
  void release();
};

}  // namespace distllm
