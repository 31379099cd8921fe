// `distllm plan`: per-rank memory, communication and step time of a training job
// under each data-parallel strategy, with tensor (and sequence) parallelism, and
// the fastest layout that fits.
//
// Memory follows what DataParallel and TrainGraph allocate (category by category,
// fp32 Adam: parameters 4Ψ, gradients 4Ψ, moments 8Ψ, split as the strategy
// splits them; activations from the model's shapes; gathered ZeRO-3 groups and
// gradient buckets from the group and bucket sizes). Communication counts the
// bytes each collective of a step moves; time divides them by the bus bandwidth and
// the step's FLOPs by the GEMM rate, and charges only the communication that
// cannot overlap computation. Tensor parallelism divides each layer's weights,
// FLOPs and head-sized activations by tp and adds its all-reduces (four of B*T*C
// per layer, one each for the embedding and the head's input gradient), which
// block the computation, so all of their time is exposed. Sequence parallelism
// moves the same bytes and divides the residual-stream activations by tp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distllm/model/config.h"
#include "distllm/model/train_graph.h"
#include "distllm/train/parallel_config.h"

namespace distllm::plan {

struct PlanInput {
  ModelConfig model;
  int world = 1;  // all ranks: world / tp data-parallel ranks
  int tp = 1;     // tensor-parallel group size (0 in compare(): every size that splits the model)
  bool sequence_parallel = false;
  int hosts = 1;  // hsdp: the default shard group is world / hosts
  int batch = 8;  // per data-parallel rank, per micro-batch
  int seq = 256;
  int grad_accum = 1;
  ParallelConfig parallel;
  ActivationCheckpointing checkpointing;
};

struct MemoryPlan {
  int64_t params = 0, master = 0, grads = 0, optimizer = 0;
  int64_t activations = 0;
  int64_t gathered = 0;      // ZeRO-3 groups alive at once
  int64_t comm_buffers = 0;  // gradient buckets and bf16 staging
  int64_t total() const { return params + master + grads + optimizer + activations + gathered + comm_buffers; }
};

struct MachineRates {
  double gemm_gflops = 100;  // per rank, with its threads
  double busbw_gbs = 10;     // collective bus bandwidth
  std::string source;        // "measured" or "given"
};

struct Estimate {
  PlanInput input;
  MemoryPlan memory;
  int64_t comm_bytes = 0;  // per rank per optimizer step
  double compute_s = 0, comm_s = 0, exposed_comm_s = 0, step_s = 0;
  double tokens_per_s = 0;  // the whole job's
  bool fits = true;
};

Estimate estimate(const PlanInput& input, const MachineRates& rates, double memory_limit_bytes = 0);
// Every strategy (and, when it does not fit, with activation checkpointing), in the
// order of `strategies` or all of them.
std::vector<Estimate> compare(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes);
// The fastest estimate that fits; throws naming the smallest requirement when none does.
Estimate recommend(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes);
std::string describe_choice(const Estimate& e);

// Rates measured here: a GEMM of a training-like shape on `threads` threads and the
// memory bandwidth (a shared-memory collective's bus bandwidth is about half of it).
MachineRates measure_rates(int threads);
// Cheap defaults from a short measurement (used by `train --strategy auto`).
MachineRates default_rates(int threads);
double host_memory_bytes();

}  // namespace distllm::plan
