// Fuzzes config.json parsing into a ModelConfig (and its validation), against
// allocation size: whatever is accepted must lay out within the bounds, with a
// parameter count that agrees with the layout. A config that slipped past the
// bounds would grow the layout (or overflow) and trip libFuzzer's RSS limit or UBSan.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "distllm/base/error.h"
#include "distllm/model/config.h"
#include "distllm/model/param_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    distllm::ModelConfig c = distllm::ModelConfig::from_hf_json(j, "config.json");
    c.to_hf_json();
    // What the loader does next: refuse what does not fit (here a 1 GB budget, below
    // the fuzzer's RSS limit), then lay the model out.
    c.check_fits(int64_t(1) << 30, "config.json");
    distllm::ParamLayout layout(c);
    int64_t numel = 0;
    for (const auto& t : layout.tensors()) numel += t.numel;
    if (numel != c.num_parameters()) std::abort();
  } catch (const distllm::Error&) {
  }
  return 0;
}
