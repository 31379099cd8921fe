// Fuzzes the pytorch_model.bin reader: the zip index (zip64 included), the restricted
// unpickler and the tensor extents it checks, then reads every tensor it accepts.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/io/torch_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = distllm::TorchCheckpointFile::parse({data, size}, "fuzz.bin");
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const auto& t = f.tensors()[i];
      if (t.numel() > (1 << 20)) continue;
      std::vector<float> out(static_cast<size_t>(t.numel()));
      distllm::convert_to_f32(t.dtype, f.bytes(i).data(), out.data(), out.size());
    }
  } catch (const distllm::Error&) {
  }
  return 0;
}
