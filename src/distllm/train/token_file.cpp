#include "distllm/train/token_file.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm {

namespace {

uint32_t load_u32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint64_t load_u64(const uint8_t* p) { return load_u32(p) | (static_cast<uint64_t>(load_u32(p + 4)) << 32); }
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

TokenFileHeader parse_token_file_header(std::span<const uint8_t> bytes, const std::string& origin) {
  const char* o = origin.c_str();
  DL_CHECK(bytes.size() >= TokenFileHeader::kSize, "%s: truncated token file: %zu bytes, the header alone needs %zu", o,
           bytes.size(), TokenFileHeader::kSize);
  DL_CHECK(std::memcmp(bytes.data(), TokenFileHeader::kMagic, 4) == 0,
           "%s: not a distllm token file (bad magic; expected \"DLTK\")", o);
  uint32_t version = load_u32(bytes.data() + 4);
  DL_CHECK(version == TokenFileHeader::kVersion, "%s: unsupported token file version %u (expected %u)", o, version,
           TokenFileHeader::kVersion);
  TokenFileHeader h;
  h.token_bytes = load_u32(bytes.data() + 8);
  DL_CHECK(h.token_bytes == 2 || h.token_bytes == 4, "%s: token width %u bytes is invalid (must be 2 or 4)", o,
           h.token_bytes);
  h.vocab_size = load_u32(bytes.data() + 12);
  h.count = load_u64(bytes.data() + 16);
  uint64_t payload = bytes.size() - TokenFileHeader::kSize;
  DL_CHECK(h.count <= payload / h.token_bytes && h.count * h.token_bytes == payload,
           "%s: header says %llu tokens (%llu bytes) but the file holds %llu bytes of tokens%s", o,
           (unsigned long long)h.count, (unsigned long long)h.count * h.token_bytes, (unsigned long long)payload,
           h.count * h.token_bytes > payload ? " (truncated?)" : "");
  if (h.token_bytes == 2 && h.vocab_size != 0)
    DL_CHECK(h.vocab_size <= 65536, "%s: vocabulary of %u does not fit 16-bit tokens", o, h.vocab_size);
  return h;
}

TokenFile::TokenFile(const std::string& path) : file_(path) {
  header_ = parse_token_file_header({file_.data(), file_.size()}, path);
  tokens_ = file_.data() + TokenFileHeader::kSize;
}

uint32_t TokenFile::at(uint64_t i) const {
  if (header_.token_bytes == 2) return tokens_[2 * i] | (tokens_[2 * i + 1] << 8);
  return load_u32(tokens_ + 4 * i);
}

void TokenFile::read(uint64_t begin, uint64_t n, int32_t* out) const {
  DL_CHECK(begin + n <= header_.count, "%s: read of tokens [%llu, %llu) past the end (%llu)", path().c_str(),
           (unsigned long long)begin, (unsigned long long)(begin + n), (unsigned long long)header_.count);
  if (header_.token_bytes == 2) {
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, tokens_ + 2 * (begin + i), 2);
      out[i] = v;
    }
  } else {
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, tokens_ + 4 * (begin + i), 4);
      out[i] = static_cast<int32_t>(std::min<uint32_t>(v, 0x7fffffffu));
    }
  }
}

uint32_t TokenFile::max_token() const {
  if (max_token_ >= 0) return static_cast<uint32_t>(max_token_);
  constexpr int64_t kChunk = 1 << 20;
  int64_t n = static_cast<int64_t>(header_.count);
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint32_t> partial(chunks, 0);
  parallel_for(0, chunks, [&](int64_t c) {
    uint32_t m = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) m = std::max(m, at(i));
    partial[c] = m;
  });
  uint32_t m = 0;
  for (uint32_t p : partial) m = std::max(m, p);
  max_token_ = m;
  return m;
}

void write_token_file(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocab_size) {
  uint32_t width = vocab_size != 0 && vocab_size <= 65536 ? 2 : 4;
  if (width == 2)
    for (uint32_t t : tokens) DL_CHECK(t < 65536, "%s: token %u does not fit 16 bits", path.c_str(), t);
  uint8_t header[TokenFileHeader::kSize] = {};
  std::memcpy(header, TokenFileHeader::kMagic, 4);
  store_u32(header + 4, TokenFileHeader::kVersion);
  store_u32(header + 8, width);
  store_u32(header + 12, vocab_size);
  store_u64(header + 16, tokens.size());
  write_file_atomic_with(path, [&](int fd) {
    write_all(fd, header, sizeof(header), path);
    std::vector<uint8_t> buf;
    constexpr size_t kBatch = 1 << 16;
    for (size_t i = 0; i < tokens.size(); i += kBatch) {
      size_t n = std::min(kBatch, tokens.size() - i);
      buf.resize(n * width);
      for (size_t j = 0; j < n; ++j) {
        uint32_t t = tokens[i + j];
        for (uint32_t b = 0; b < width; ++b) buf[j * width + b] = static_cast<uint8_t>(t >> (8 * b));
      }
      write_all(fd, buf.data(), buf.size(), path);
    }
  });
}

}  // namespace distllm
