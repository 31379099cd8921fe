// How `distllm train` spreads one model over data-parallel ranks.
//
//   strategy   parameters   gradients          optimizer state   per step
//   none       full         full               full              (one process)
//   ddp        full         full, all-reduced  full              all-reduce 2Ψ
//   zero1      full         full               shard             reduce-scatter Ψ + all-gather Ψ
//   zero2      full         shard              shard             reduce-scatter Ψ + all-gather Ψ
//   zero3      shard        shard              shard             all-gather 2Ψ + reduce-scatter Ψ
//   hsdp       zero3 inside a shard group (a host), replicated across groups, whose
//              gradient shards are all-reduced
// (Ψ = parameter bytes.) Each is a class behind one interface (sharding_strategy.h);
// the trainer sees them all through DataParallel (data_parallel.h).
#pragma once

#include <string>

namespace distllm {

enum class Strategy { kNone, kDdp, kZero1, kZero2, kZero3, kHsdp };
enum class MixedPrecision {
  kFp32,      // everything in f32
  kBf16Comm,  // gradients reduced in bf16; accumulation and master weights in f32
  kBf16,      // also parameters: compute uses bf16-rounded weights, gathered in bf16;
              // f32 master shards
};

struct ParallelConfig {
  Strategy strategy = Strategy::kNone;
  double bucket_mb = 25;       // gradient bucket cap (MiB of f32 gradients)
  double first_bucket_mb = 1;  // the first bucket (ready earliest) is smaller
  MixedPrecision mixed_precision = MixedPrecision::kFp32;
  bool reshard_after_forward = true;  // zero3/hsdp: free gathered groups after forward
  bool prefetch = true;               // zero3/hsdp: gather the next group while computing
  bool check_replicas = false;        // debug: compare replicated parameters after every step
  int shard_size = 0;                 // hsdp: ranks per shard group (0: ranks per host)

  bool shards_params() const { return strategy == Strategy::kZero3 || strategy == Strategy::kHsdp; }
  bool shards_grads() const { return shards_params() || strategy == Strategy::kZero2; }
  void validate() const;
};

Strategy parse_strategy(const std::string& text);  // throws naming the value
const char* strategy_name(Strategy s);
MixedPrecision parse_mixed_precision(const std::string& text);
const char* mixed_precision_name(MixedPrecision m);

}  // namespace distllm
