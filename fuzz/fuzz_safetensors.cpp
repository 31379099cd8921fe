// Fuzzes the safetensors header validator and the tensor conversions behind it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto st = distllm::SafetensorsFile::parse({data, size}, "fuzz.safetensors");
    for (const auto& t : st.tensors()) {
      if (t.numel() > (1 << 20)) continue;
      std::vector<float> out(static_cast<size_t>(t.numel()));
      st.read_f32(t, out.data());
    }
  } catch (const distllm::Error&) {
  }
  return 0;
}
