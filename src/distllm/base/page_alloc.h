// Where AlignedBuffer's memory comes from. Large buffers (weights, optimizer
// state, the KV cache) are aligned to 2 MiB and marked MADV_HUGEPAGE, so Linux
// backs them with transparent huge pages where its policy is `madvise` (Debian's
// default). Decode streams every weight once per token; with 4 KiB pages the
// hardware prefetchers stop at each page boundary and every page costs a TLB walk.
// Measured: int8 gpt2-124M decode at batch 1, 6.1 -> 4.8 ms/token (docs/benchmarks.md).
//
// DISTLLM_HUGE_PAGES=0 turns the advice off (for comparisons); the alignment stays.
#pragma once

#include <cstddef>

namespace distllm {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// Buffers at least this large get huge-page alignment and advice.
inline constexpr size_t kHugePageThreshold = size_t{4} << 20;

// `bytes` (a multiple of `align`, which is a power of two) aligned to `align`, or to
// kHugePageBytes when large; nullptr when out of memory. Free with std::free.
void* allocate_pages(size_t bytes, size_t align);

// Whether large allocations are advised to use huge pages (DISTLLM_HUGE_PAGES).
bool huge_pages_enabled();

}  // namespace distllm
