// Element types and reduction operators understood by every communication backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace distllm::comm {

// bf16 and f16 are storage formats: reductions convert to f32, accumulate there, and
// round back once (round to nearest even).
enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8 };

// kAvg divides the sum by the group size. On floating types the sum is divided
// exactly (x / n, rounded once); on integer types the sum wraps in the element type
// exactly as kSum does and is then divided truncating toward zero (NCCL's rule).
enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProd };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                       DType::kI32, DType::kI64, DType::kU8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                             ReduceOp::kMin, ReduceOp::kProd};

size_t dtype_size(DType t);
bool dtype_is_float(DType t);  // f32, f64, bf16, f16
const char* dtype_name(DType t);       // "f32", "bf16", ...
const char* dtype_nccl_name(DType t);  // nccl-tests spelling: "float", "bfloat16", ...
// Accepts both spellings; throws distllm::Error naming the value otherwise.
DType parse_dtype(std::string_view text);

const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min", "prod"
ReduceOp parse_reduce_op(std::string_view text);

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }

// Scalar conversions (round to nearest even; NaN stays NaN, overflow becomes inf).
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float value);

}  // namespace distllm::comm
