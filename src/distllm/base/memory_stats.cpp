#include "distllm/base/memory_stats.h"

#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace distllm {

int64_t peak_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      std::sscanf(line + 6, "%lld", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

namespace {

// A number from a one-line cgroup file; -1 for "max", absent or unreadable.
int64_t read_cgroup_limit(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  char text[64] = {0};
  bool ok = std::fgets(text, sizeof text, f) != nullptr;
  std::fclose(f);
  long long v = -1;
  if (!ok || std::sscanf(text, "%lld", &v) != 1 || v <= 0) return -1;
  return v;
}

}  // namespace

int64_t usable_memory_bytes() {
  int64_t physical = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  int64_t best = physical > 0 ? physical : INT64_MAX;
  for (const char* p : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    int64_t limit = read_cgroup_limit(p);
    if (limit > 0 && limit < best) best = limit;
  }
  return best;
}

}  // namespace distllm
