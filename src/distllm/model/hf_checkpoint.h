// Hugging Face model directories: config.json + model.safetensors (or shards
// model-0000k-of-0000N.safetensors with model.safetensors.index.json) +
// generation_config.json, plus whatever tokenizer files the caller adds. Directories
// that ship only PyTorch's pytorch_model.bin (or pytorch_model-0000k-of-0000N.bin
// with pytorch_model.bin.index.json) are read too (io/torch_pickle.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distllm/model/model_weights.h"
#include "distllm/model/transformer.h"

namespace distllm {

struct SaveOptions {
  // Split the weights into shards of at most this many bytes (0 = one file).
  uint64_t max_shard_bytes = 0;
  // The tensors' dtype in the files: f32, or bf16 / f16 (rounded to nearest even),
  // as Hugging Face checkpoints are usually published; config.json's torch_dtype says it.
  DType dtype = DType::kF32;
  // Extra files to write into the directory (name -> content), e.g. tokenizer.json.
  std::map<std::string, std::string> extra_files;
  // Written as safetensors __metadata__ (format=pt is always added).
  std::map<std::string, std::string> metadata;
  int eos_token_id = -1;  // for generation_config.json, when >= 0
  int bos_token_id = -1;
  // Allow a non-empty folder that is not a model directory; only model files in it
  // are replaced (model_dir.h).
  bool overwrite = false;
};

// Writes the directory so that it appears complete or not at all (model_dir.h:
// which folders may receive a model, and the atomic swap).
void save_hf_model(const Transformer& model, const std::string& dir, const SaveOptions& options = {});

// Reads config.json and the weights (single file or sharded), converting F16/BF16/
// F64 to f32. Every parameter must be present with its exact shape; unknown tensors
// are an error, except buffers transformers itself writes (attn.bias masks,
// rotary inv_freq) and a tied lm_head.weight.
std::unique_ptr<Transformer> load_hf_model(const std::string& dir);

// The same files and checks, but the tensors stay memory-mapped in the files' own
// dtype (nothing is converted): what serving reads, so a bf16 checkpoint served as
// bf16 is never widened to f32 (model_weights.h). A file truncated in place while
// mapped faults whoever reads it next, so callers read the result only while they
// build from it and then drop it (InferenceModel keeps nothing that points into it).
std::shared_ptr<const ModelWeights> map_hf_model(const std::string& dir);

ModelConfig load_hf_config(const std::string& dir);

// model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map": {tensor: file}}.
struct ShardIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> files;                  // distinct shard files, first-seen order
  int64_t total_size = -1;                         // -1 when absent
};
// Validates the structure; shard names must be plain file names (no '/' or '..').
ShardIndex parse_shard_index(const std::string& text, const std::string& origin);

}  // namespace distllm
