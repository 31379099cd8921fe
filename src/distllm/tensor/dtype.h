// Element types and conversions: the one dtype enum and the one bf16/f16 codec of
// the whole project (tensors, files, collectives, kernels). On this hardware bf16
// and f16 are storage formats: they are converted to f32 in registers before any
// arithmetic, and rounded back once (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace distllm {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kU16, kU32, kU64 };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64,
                                       DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool,
                                       DType::kU16, DType::kU32, DType::kU64};

size_t dtype_size(DType t);
// safetensors spelling: "F32", "BF16", "I64", "BOOL" ...
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType t);  // f32, f64, f16, bf16
// Lower case, for flags and logs: "f32", "bf16", "i64", "bool" ...
const char* dtype_short_name(DType t);
// nccl-tests spelling: "float", "double", "bfloat16", "half", "int32", "uint8" ...
const char* dtype_nccl_name(DType t);
// Any of the three spellings, or "float32", "float64", "float16". Throws
// distllm::Error naming the text.
DType parse_dtype(std::string_view text);

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int16_t>() { return DType::kI16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kI8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::kU32; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::kU64; }

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// f16: subnormals exact, overflow to inf, NaN stays NaN (payload kept).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (of type `from`) to f32. Supports every float type
// and the integer types; bool becomes 0/1.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// Converts n f32 values to `to` (F32, F16, BF16 or F64).
void convert_from_f32(DType to, const float* src, void* dst, size_t n);

// The index of the first NaN or infinity among n elements of a float dtype (f32,
// f64, f16, bf16), or -1 when all are finite (always -1 for integer dtypes). Reads
// the exponent bits only, in parallel: one pass at memory bandwidth.
int64_t first_non_finite(DType t, const void* data, size_t n);

}  // namespace distllm
