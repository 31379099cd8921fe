// Fuzzes model.safetensors.index.json parsing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "distllm/base/error.h"
#include "distllm/model/hf_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto index = distllm::parse_shard_index(std::string(reinterpret_cast<const char*>(data), size), "index.json");
    for (const auto& f : index.files)
      if (f.find('/') != std::string::npos) __builtin_trap();  // must never escape the directory
  } catch (const distllm::Error&) {
  }
  return 0;
}
