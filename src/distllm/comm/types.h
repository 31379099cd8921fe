// Element types and reduction operators understood by every communication backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "distllm/tensor/dtype.h"

namespace distllm::comm {

// Collectives use the project's one dtype enum (tensor/dtype.h). bf16 and f16 are
// storage formats: reductions convert to f32, accumulate there, and round back once.
using distllm::DType;

// kAvg divides the sum by the group size. On floating types the sum is divided
// exactly (x / n, rounded once); on integer types the sum wraps in the element type
// exactly as kSum does and is then divided truncating toward zero (NCCL's rule).
enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProd };

// The element types collectives move and reduce.
inline constexpr DType kCollectiveDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                              DType::kI32, DType::kI64, DType::kU8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                             ReduceOp::kMin, ReduceOp::kProd};

bool is_collective_dtype(DType t);
// Throws distllm::Error naming the dtype when collectives do not support it.
void check_collective_dtype(DType t);

const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min", "prod"
ReduceOp parse_reduce_op(std::string_view text);

}  // namespace distllm::comm
