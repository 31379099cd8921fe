// Token shard files: a 32-byte little-endian header followed by the tokens.
//
//   offset 0   char[4]  magic "DLTK"
//   offset 4   u32      version (1)
//   offset 8   u32      bytes per token: 2 (uint16) or 4 (uint32)
//   offset 12  u32      vocabulary size of the tokenizer that wrote it (0 = unknown)
//   offset 16  u64      token count
//   offset 24  u64      reserved, 0
//   offset 32  tokens
//
// Readers check the magic, version, width and that the file holds exactly `count`
// tokens, and name the file in every error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distllm/io/file_util.h"

namespace distllm {

struct TokenFileHeader {
  static constexpr char kMagic[4] = {'D', 'L', 'T', 'K'};
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kSize = 32;
  uint32_t token_bytes = 2;
  uint32_t vocab_size = 0;
  uint64_t count = 0;
};

// Parses and validates a header against the total file size; throws naming `origin`.
TokenFileHeader parse_token_file_header(std::span<const uint8_t> bytes, const std::string& origin);

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);  // memory-maps and validates

  const std::string& path() const { return file_.path(); }
  uint64_t size() const { return header_.count; }
  uint32_t vocab_size() const { return header_.vocab_size; }
  uint32_t token_bytes() const { return header_.token_bytes; }
  uint32_t at(uint64_t i) const;
  // Copies tokens [begin, begin + n) into out as int32.
  void read(uint64_t begin, uint64_t n, int32_t* out) const;
  // Largest token id in the file (scanned in parallel once, then remembered).
  uint32_t max_token() const;

 private:
  MappedFile file_;
  TokenFileHeader header_;
  const uint8_t* tokens_ = nullptr;
  mutable int64_t max_token_ = -1;  // -1 until scanned
};

// Writes a token file atomically. Picks uint16 when vocab_size <= 65536.
void write_token_file(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocab_size);

}  // namespace distllm
