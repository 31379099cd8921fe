#include "distllm/base/page_alloc.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace distllm {

bool huge_pages_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DISTLLM_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

void* allocate_pages(size_t bytes, size_t align) {
  if (bytes < kHugePageThreshold) return std::aligned_alloc(align, bytes);
  void* p = std::aligned_alloc(kHugePageBytes, bytes);
  // Before the first touch, so the faults take huge pages. Only whole huge pages are
  // advised; advice is a hint, and its failure (no THP in this kernel) is harmless.
  if (p != nullptr && huge_pages_enabled()) madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return p;
}

}  // namespace distllm
