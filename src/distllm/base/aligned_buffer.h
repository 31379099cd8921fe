// A heap array aligned to a cache line (and AVX2 loads; large ones to huge pages,
// base/page_alloc.h), zero-initialised unless allocated with
// resize_uninitialized. Every byte is counted in MemoryStats.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "distllm/base/memory_stats.h"
#include "distllm/base/page_alloc.h"

namespace distllm {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  ~AlignedBuffer() { release(); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // Discards the old contents; the new buffer is all zero bytes.
  void resize(size_t n) {
    resize_uninitialized(n);
    if (data_) std::memset(static_cast<void*>(data_), 0, padded_bytes(n));
  }
  // Discards the old contents; the new contents are unspecified (for buffers the
  // caller overwrites completely, such as the target of a gather).
  void resize_uninitialized(size_t n) {
    release();
    if (n == 0) return;
    data_ = static_cast<T*>(allocate_pages(padded_bytes(n), kAlign));
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = n;
    MemoryStats::on_alloc(static_cast<int64_t>(padded_bytes(n)));
  }
  // Frees the memory; size() becomes 0.
  void release() {
    if (data_ != nullptr) MemoryStats::on_free(static_cast<int64_t>(padded_bytes(size_)));
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
  }
  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  static size_t padded_bytes(size_t n) { return (n * sizeof(T) + kAlign - 1) / kAlign * kAlign; }

  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace distllm
