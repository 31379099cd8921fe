// Fuzzes the body parser of POST /internal/kv/prefill (serve/kv_transfer/wire.h):
// whatever it accepts is in range and re-encodes to a body it accepts again.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/kv_transfer/wire.h"

using namespace distllm::serve::kv_transfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<int32_t> tokens = parse_prefill_request(in, 1000, 4096);
    if (tokens.empty() || tokens.size() > 4096) __builtin_trap();
    for (int32_t t : tokens)
      if (t < 0 || t >= 1000) __builtin_trap();
    if (parse_prefill_request(encode_prefill_request(tokens), 1000, 4096) != tokens) __builtin_trap();
  } catch (const distllm::Error&) {
  }
  return 0;
}
