// `mpirun -np N distllm bench decode --tp N`: decode with the model split over N
// ranks side by side with the whole model on rank 0 alone, in the same job.
#pragma once

#include <memory>
#include <vector>

#include "distllm/comm/process_group.h"
#include "distllm/model/transformer.h"
#include "distllm/tensor/dtype.h"

namespace distllm {

struct DecodeBenchOptions {
  std::vector<int> batches;
  int context = 128, steps = 8, rounds = 5, block_size = 16;
  DType dtype = DType::kF32, kv_dtype = DType::kF32;
};

// Collective over `world` (its ranks are the tp group). Rank 0 prints the table.
int bench_decode_tp(std::shared_ptr<const Transformer> model, const DecodeBenchOptions& options,
                    const comm::ProcessGroupPtr& world);

}  // namespace distllm
