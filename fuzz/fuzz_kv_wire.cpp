// Fuzzes the KV transfer stream decoder (serve/kv_transfer/wire.h): whole, and fed
// in pieces whose sizes come from the input, the two must agree; a stream that
// decodes must re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/kv_transfer/wire.h"

using namespace distllm::serve::kv_transfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  DecoderLimits limits;
  limits.max_block_bytes = 1 << 20;
  limits.max_total_bytes = 1 << 24;
  KvStreamDecoder whole(limits);
  const KvStreamDecoder::Status a = whole.feed(in);
  KvStreamDecoder pieces(limits);
  KvStreamDecoder::Status b = KvStreamDecoder::Status::kNeedMore;
  size_t pos = 0, step = 1;
  while (pos < in.size()) {
    const size_t n = std::min(step, in.size() - pos);
    b = pieces.feed(in.substr(pos, n));
    pos += n;
    step = step * 3 % 17 + 1;
  }
  if (in.empty()) b = pieces.status();
  if (a != b) __builtin_trap();
  if (a == KvStreamDecoder::Status::kDone) {
    if (whole.blocks() != pieces.blocks()) __builtin_trap();
    if (encode_all(whole.header(), whole.blocks()) != in) __builtin_trap();
  }
  std::vector<std::string> blocks;
  try {
    decode_all(in, blocks, limits);
    if (a != KvStreamDecoder::Status::kDone) __builtin_trap();
  } catch (const distllm::Error&) {
    if (a == KvStreamDecoder::Status::kDone) __builtin_trap();
  }
  return 0;
}
