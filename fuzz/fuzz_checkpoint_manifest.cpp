// Fuzzes checkpoint manifest.json parsing: any input is either refused with a
// distllm::Error or yields a manifest whose slices tile every tensor and whose file
// names cannot leave the checkpoint directory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "distllm/base/error.h"
#include "distllm/checkpoint/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto m = distllm::checkpoint::Manifest::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& f : m.files)
      if (f.name.find('/') != std::string::npos || f.name == ".." || f.name == ".") __builtin_trap();
    for (const auto& t : m.tensors) {
      int64_t at = 0;
      for (const auto& s : t.slices) {
        if (s.begin != at || s.end <= s.begin || m.file(s.file) == nullptr) __builtin_trap();
        at = s.end;
      }
      if (at != t.numel()) __builtin_trap();
    }
    (void)m.to_json();
  } catch (const distllm::Error&) {
  }
  return 0;
}
