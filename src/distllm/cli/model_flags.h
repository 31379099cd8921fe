// Model selection flags shared by `train` and `bench train`:
//   --preset NAME, or --family gpt2|llama with explicit sizes; any explicit size
//   overrides the preset's value.
#pragma once

#include "distllm/cli/args.h"
#include "distllm/model/config.h"
#include "distllm/tensor/dtype.h"

namespace distllm {

// vocab_hint: used when neither --vocab-size nor the preset decides (e.g. the data's
// tokenizer vocabulary); 0 keeps the preset's.
ModelConfig model_config_from_flags(Args& args, const std::string& default_preset, int vocab_hint);

// `--dtype f32|bf16|int8`: how inference stores the linear weights (bf16
// weight-only, int8 as q8_0 x q8_0; kernels/linear_bi.h). Shared by serve, generate and bench decode.
DType inference_dtype_flag(Args& args);
// "f32", "bf16" or "int8"; throws distllm::Error naming the text otherwise.
DType parse_inference_dtype(const std::string& text);

// `--kv-cache-dtype f32|bf16|int8`: how the paged K/V cache stores its elements
// (model/kv_cache.h). Shared by serve, generate, bench decode and perplexity.
DType kv_cache_dtype_flag(Args& args);
// "f32", "bf16" or "int8"; throws distllm::Error naming the text otherwise.
DType parse_kv_cache_dtype(const std::string& text);

// How --dtype and --kv-cache-dtype spell a dtype ("int8" for DType::kI8, whose
// tensor name is "i8"), for what the commands print.
const char* inference_dtype_name(DType dtype);

}  // namespace distllm
