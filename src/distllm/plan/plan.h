// `distllm plan`: per-rank memory, communication and step time of a training job
// under each data-parallel strategy, and the fastest strategy that fits.
//
// Memory follows what DataParallel and TrainGraph allocate (category by category,
// fp32 Adam: parameters 4Ψ, gradients 4Ψ, moments 8Ψ, split as the strategy
// splits them; activations from the model's shapes; gathered ZeRO-3 groups and
// gradient buckets from the group and bucket sizes). Communication counts the
// bytes each collective of a step moves; time divides them by the bus bandwidth and
// the step's FLOPs by the GEMM rate, and charges only the communication that
// cannot overlap computation.
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
  int world = 1;
  int hosts = 1;  // hsdp: the default shard group is world / hosts
  int batch = 8;  // per rank, per micro-batch
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
