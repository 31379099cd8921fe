// safetensors: reader (memory-mapped, zero-copy, validated before use) and writer
// (atomic, aligned, padded header). Format facts: ../../../shared/REFERENCE.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/io/file_util.h"
#include "distllm/tensor/dtype.h"

namespace distllm {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty = scalar
  uint64_t begin = 0;          // byte offsets into the data section
  uint64_t end = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  // Maps and validates `path`; throws distllm::Error naming the file and problem.
  static SafetensorsFile open(const std::string& path);
  // Validates an in-memory image (the bytes must outlive the object); `origin`
  // names it in errors. Used by the fuzz target and tests.
  static SafetensorsFile parse(std::span<const uint8_t> bytes, const std::string& origin);

  const std::string& origin() const { return origin_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const TensorInfo& get(std::string_view name) const;  // throws if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Throws when the file was rewritten in place since it was mapped (MappedFile::changed).
  void check_unchanged() const {
    if (file_) file_->check_unchanged("a checkpoint");
  }
  // The tensor's raw bytes, pointing into the mapping (no copy).
  std::span<const uint8_t> bytes(const TensorInfo& t) const;
  // Converts any numeric dtype (F16/BF16/F64 and integers included) to f32.
  void read_f32(const TensorInfo& t, float* out) const;
  std::vector<float> read_f32(std::string_view name) const;

 private:
  std::string origin_;
  std::shared_ptr<MappedFile> file_;  // null for parse()
  const uint8_t* data_ = nullptr;     // start of the data section
  uint64_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;

  void validate_and_index(std::span<const uint8_t> bytes);
};

class SafetensorsWriter {
 public:
  // The data pointer must stay valid until write(). `data` holds numel * dtype size bytes.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const float* data) {
    add(name, DType::kF32, std::move(shape), data);
  }
  // Stores f32 data converted to `dtype` (F16, BF16, F64) at write time.
  void add_converted(const std::string& name, DType dtype, std::vector<int64_t> shape, const float* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  uint64_t data_bytes() const;
  // Atomically writes the file (temporary + fsync + rename).
  void write(const std::string& path) const;
  // The same, passing every byte written to `observe` in order (e.g. a checksum).
  void write(const std::string& path, const std::function<void(const void*, size_t)>& observe) const;
  // The serialised header (8-byte length + padded JSON), for tests.
  std::string header() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    std::vector<uint8_t> owned;  // converted copies
    uint64_t size;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;

  std::vector<const Entry*> ordered() const;
};

}  // namespace distllm
