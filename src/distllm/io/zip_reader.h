// A read-only view of an uncompressed ("stored") zip archive, as torch.save writes
// pytorch_model.bin: the central directory is parsed (zip64 included) and each
// entry's bytes are a span into the archive, never copied. Deflated entries,
// encryption and multi-disk archives are refused by name; every offset and size is
// checked against the archive before it is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "distllm/io/file_util.h"

namespace distllm {

class ZipArchive {
 public:
  // Maps and indexes `path`; throws distllm::Error naming the file and the problem.
  static ZipArchive open(const std::string& path);
  // Indexes an in-memory archive (the bytes must outlive the object); `origin`
  // names it in errors.
  static ZipArchive parse(std::span<const uint8_t> bytes, const std::string& origin);

  const std::string& origin() const { return origin_; }
  // Entry name -> its stored bytes.
  const std::map<std::string, std::span<const uint8_t>, std::less<>>& entries() const { return entries_; }
  const std::span<const uint8_t>* find(std::string_view name) const;
  void check_unchanged() const {
    if (file_) file_->check_unchanged("a checkpoint");
  }

 private:
  std::string origin_;
  std::shared_ptr<MappedFile> file_;  // null for parse()
  std::map<std::string, std::span<const uint8_t>, std::less<>> entries_;

  void index(std::span<const uint8_t> bytes);
};

}  // namespace distllm
