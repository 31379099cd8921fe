// XXH64 checksums (Debian's libxxhash) of checkpoint files, streamed while they are
// written and recomputed when they are read back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace distllm::checkpoint {

class Xxh64 {
 public:
  Xxh64();
  ~Xxh64();
  Xxh64(const Xxh64&) = delete;
  Xxh64& operator=(const Xxh64&) = delete;
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  void* state_;
};

// The checksum of a whole file; throws naming the file if it cannot be read.
uint64_t hash_file(const std::string& path);
std::string hex64(uint64_t v);        // 16 lowercase hex digits
bool parse_hex64(const std::string& s, uint64_t* out);

}  // namespace distllm::checkpoint
