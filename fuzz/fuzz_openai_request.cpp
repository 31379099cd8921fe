// Request bodies come from the network: any bytes must parse into a request or be
// refused with an ApiError (a 4xx), never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "distllm/serve/api/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace distllm::serve::api;
  std::string body(reinterpret_cast<const char*>(data), size);
  try {
    Json j = parse_body(body);
    try {
      parse_completion_request(j);
    } catch (const ApiError& e) {
      if (e.status() < 400 || e.status() >= 500) __builtin_trap();
    }
    parse_chat_request(j);
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) __builtin_trap();
  }
  return 0;
}
