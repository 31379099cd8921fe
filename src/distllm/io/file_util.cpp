#include "distllm/io/file_util.h"

#include "distllm/io/mapping_guard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "distllm/base/error.h"

namespace distllm {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

}  // namespace

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DL_CHECK(fd >= 0, "%s: cannot open: %s", path.c_str(), errno_text().c_str());
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw_error(strprintf("%s: read failed: %s", path.c_str(), std::strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    DL_CHECK(n > 0, "%s: write failed: %s", path.c_str(), errno_text().c_str());
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void write_file_atomic_with(const std::string& path, const std::function<void(int fd)>& fn) {
  std::string tmp = path + strprintf(".tmp.%d", static_cast<int>(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DL_CHECK(fd >= 0, "%s: cannot create: %s", tmp.c_str(), errno_text().c_str());
  try {
    fn(fd);
    DL_CHECK(::fsync(fd) == 0, "%s: fsync failed: %s", tmp.c_str(), errno_text().c_str());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw_error(strprintf("%s: rename failed: %s", path.c_str(), std::strerror(err)));
  }
  fsync_directory(parent_dir(path));
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file_atomic(const std::string& path, std::string_view data) {
  write_file_atomic_with(path, [&](int fd) { write_all(fd, data.data(), data.size(), path); });
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  DL_CHECK(!ec, "%s: cannot create directory: %s", path.c_str(), ec.message().c_str());
}

std::string join_path(const std::string& a, const std::string& b) {
  return (std::filesystem::path(a) / b).string();
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DL_CHECK(fd >= 0, "%s: cannot open: %s", path.c_str(), errno_text().c_str());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_error(strprintf("%s: stat failed: %s", path.c_str(), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(strprintf("%s: not a regular file", path.c_str()));
  }
  size_ = static_cast<size_t>(st.st_size);
  dev_ = static_cast<uint64_t>(st.st_dev);
  ino_ = static_cast<uint64_t>(st.st_ino);
  mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw_error(strprintf("%s: mmap failed: %s", path.c_str(), std::strerror(err)));
    }
    data_ = static_cast<const uint8_t*>(p);
    guard_ = mapping_guard::add(data_, size_);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
  mapping_guard::release(guard_);
  guard_ = -1;
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      guard_(std::exchange(o.guard_, -1)),
      dev_(o.dev_),
      ino_(o.ino_),
      mtime_ns_(o.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    guard_ = std::exchange(o.guard_, -1);
    dev_ = o.dev_, ino_ = o.ino_, mtime_ns_ = o.mtime_ns_;
  }
  return *this;
}

bool MappedFile::changed() const {
  if (mapping_guard::faulted(guard_)) return true;
  struct stat st;
  if (path_.empty() || ::stat(path_.c_str(), &st) != 0) return false;  // removed: the mapping keeps the old file
  if (static_cast<uint64_t>(st.st_dev) != dev_ || static_cast<uint64_t>(st.st_ino) != ino_) return false;
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return static_cast<size_t>(st.st_size) != size_ || mtime != mtime_ns_;
}

void MappedFile::check_unchanged(const char* what) const {
  DL_CHECK(!changed(), "%s changed while %s was being read from it (rewritten in place?); it was not used — write "
           "new files beside the old ones and rename them into place",
           path_.c_str(), what);
}

}  // namespace distllm
