// Fuzzes config.json parsing into a ModelConfig (and its validation).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "distllm/base/error.h"
#include "distllm/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    distllm::ModelConfig c = distllm::ModelConfig::from_hf_json(j, "config.json");
    c.to_hf_json();
    // Parameter counts stay representable for any accepted config.
    if (c.n_layer < 64 && c.n_embd < 65536) c.num_parameters();
  } catch (const distllm::Error&) {
  }
  return 0;
}
