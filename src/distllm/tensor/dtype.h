// Element types and conversions. On this hardware bf16/f16 are storage formats:
// they are converted to f32 in registers before any arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace distllm {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kU16, kU32, kU64 };

size_t dtype_size(DType t);
// safetensors spelling: "F32", "BF16", "I64", "BOOL" ...
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType t);

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

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (of type `from`) to f32. Supports every float type
// and the integer types; bool becomes 0/1.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// Converts n f32 values to `to` (F32, F16, BF16 or F64).
void convert_from_f32(DType to, const float* src, void* dst, size_t n);

}  // namespace distllm
