#include "distllm/train/parallel_config.h"

#include <cmath>

#include "distllm/base/error.h"

namespace distllm {

void ParallelConfig::validate() const {
  DL_CHECK(bucket_mb > 0 && std::isfinite(bucket_mb) && bucket_mb <= 1 << 16,
           "--bucket-mb must be in (0, 65536], got %g", bucket_mb);
  DL_CHECK(first_bucket_mb > 0 && std::isfinite(first_bucket_mb) && first_bucket_mb <= 1 << 16,
           "--first-bucket-mb must be in (0, 65536], got %g", first_bucket_mb);
  DL_CHECK(shard_size >= 0, "--shard-size must be >= 0, got %d", shard_size);
  DL_CHECK(shard_size == 0 || strategy == Strategy::kHsdp, "--shard-size applies to --strategy hsdp only");
}

Strategy parse_strategy(const std::string& text) {
  if (text == "none") return Strategy::kNone;
  if (text == "ddp") return Strategy::kDdp;
  if (text == "zero1") return Strategy::kZero1;
  if (text == "zero2") return Strategy::kZero2;
  if (text == "zero3" || text == "fsdp") return Strategy::kZero3;
  if (text == "hsdp") return Strategy::kHsdp;
  throw_error(strprintf("--strategy must be none, ddp, zero1, zero2, zero3 (fsdp), hsdp or auto, got '%s'",
                        text.c_str()));
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kNone: return "none";
    case Strategy::kDdp: return "ddp";
    case Strategy::kZero1: return "zero1";
    case Strategy::kZero2: return "zero2";
    case Strategy::kZero3: return "zero3";
    case Strategy::kHsdp: return "hsdp";
  }
  return "?";
}

MixedPrecision parse_mixed_precision(const std::string& text) {
  if (text == "fp32") return MixedPrecision::kFp32;
  if (text == "bf16-comm") return MixedPrecision::kBf16Comm;
  if (text == "bf16") return MixedPrecision::kBf16;
  throw_error(strprintf("--mixed-precision must be fp32, bf16-comm or bf16, got '%s'", text.c_str()));
}

const char* mixed_precision_name(MixedPrecision m) {
  switch (m) {
    case MixedPrecision::kFp32: return "fp32";
    case MixedPrecision::kBf16Comm: return "bf16-comm";
    case MixedPrecision::kBf16: return "bf16";
  }
  return "?";
}

}  // namespace distllm
