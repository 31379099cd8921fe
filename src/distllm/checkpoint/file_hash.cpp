#include "distllm/checkpoint/file_hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm::checkpoint {

Xxh64::Xxh64() : state_(XXH64_createState()) {
  DL_CHECK(state_ != nullptr, "out of memory creating a checksum state");
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0);
}

Xxh64::~Xxh64() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }

void Xxh64::update(const void* data, size_t size) { XXH64_update(static_cast<XXH64_state_t*>(state_), data, size); }

uint64_t Xxh64::digest() const { return XXH64_digest(static_cast<const XXH64_state_t*>(state_)); }

uint64_t hash_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DL_CHECK(fd >= 0, "%s: cannot open: %s", path.c_str(), std::strerror(errno));
  Xxh64 h;
  std::vector<char> buf(4 << 20);
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw_error(strprintf("%s: read failed: %s", path.c_str(), std::strerror(err)));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.digest();
}

std::string hex64(uint64_t v) { return strprintf("%016llx", static_cast<unsigned long long>(v)); }

bool parse_hex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace distllm::checkpoint
