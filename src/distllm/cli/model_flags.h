// Model selection flags shared by `train` and `bench train`:
//   --preset NAME, or --family gpt2|llama with explicit sizes; any explicit size
//   overrides the preset's value.
#pragma once

#include "distllm/cli/args.h"
#include "distllm/model/config.h"

namespace distllm {

// vocab_hint: used when neither --vocab-size nor the preset decides (e.g. the data's
// tokenizer vocabulary); 0 keeps the preset's.
ModelConfig model_config_from_flags(Args& args, const std::string& default_preset, int vocab_hint);

}  // namespace distllm
