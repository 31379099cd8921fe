// Fuzzes the token shard header check and reads of every token it admits.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/train/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto h = distllm::parse_token_file_header({data, size}, "fuzz.tok");
    // The header promised exactly `count` tokens of `token_bytes`: reading them all
    // must stay inside the buffer.
    const uint8_t* tokens = data + distllm::TokenFileHeader::kSize;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < h.count; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, tokens + i * h.token_bytes, h.token_bytes);
      sum += v;
    }
    if (sum == 0xdeadbeefcafeull) return 1;
  } catch (const distllm::Error&) {
  }
  return 0;
}
