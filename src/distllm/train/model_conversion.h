// Between training checkpoints and Hugging Face model directories (`distllm
// convert`): a checkpoint's parameters become a model directory that `serve`,
// `generate` and PyTorch load; a model directory becomes a step-0 checkpoint (fresh
// optimizer state) that `train --resume` continues from on any world size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distllm/checkpoint/shard_io.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/param_layout.h"

namespace distllm {

// The checkpoint's view of a layout: every tensor's name, shape and flat range.
std::vector<checkpoint::ParamSpan> checkpoint_spans(const ParamLayout& layout);

// `source`: a step directory, or a checkpoint directory (its newest good step is
// used). Verifies checksums and shapes, then writes `out` (model_dir.h rules).
// Returns the step directory read.
std::string checkpoint_to_hf(const std::string& source, const std::string& out, const SaveOptions& options);

// The model (parameters only) of a checkpoint: `source` as for checkpoint_to_hf.
// Verifies checksums and shapes; `step_dir` and `step`, when given, receive the step
// directory read and its step.
std::unique_ptr<Transformer> load_checkpoint_model(const std::string& source, std::string* step_dir = nullptr,
                                                   int64_t* step = nullptr);

// Writes the model directory `hf_dir` into the checkpoint directory `checkpoint_dir`
// as step 0 (parameters; zero AdamW moments, as a fresh run). Returns the step
// directory written.
std::string hf_to_checkpoint(const std::string& hf_dir, const std::string& checkpoint_dir);

}  // namespace distllm
