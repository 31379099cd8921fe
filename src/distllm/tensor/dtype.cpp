#include "distllm/tensor/dtype.h"

#include <cmath>

#include "distllm/base/error.h"

namespace distllm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: case DType::kU64: return 8;
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: case DType::kU16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kU16: return "U16";
    case DType::kU32: return "U32";
    case DType::kU64: return "U64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  static const DType all[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64,
                              DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool,
                              DType::kU16, DType::kU32, DType::kU64};
  for (DType t : all)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (rounds to inf) or inf
  if (abs < 0x38800000u) {                         // result is subnormal or zero
    if (abs < 0x33000000u) return sign;            // below half the smallest subnormal
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

void convert_to_f32(DType from, const void* src, float* dst, size_t n) {
  auto each = [&](auto load) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(i);
  };
  switch (from) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kF64: { auto p = static_cast<const double*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kF16: { auto p = static_cast<const uint16_t*>(src); each([&](size_t i) { return f16_to_f32(p[i]); }); return; }
    case DType::kBF16: { auto p = static_cast<const uint16_t*>(src); each([&](size_t i) { return bf16_to_f32(p[i]); }); return; }
    case DType::kI64: { auto p = static_cast<const int64_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kI32: { auto p = static_cast<const int32_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kI16: { auto p = static_cast<const int16_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kI8: { auto p = static_cast<const int8_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kU8: { auto p = static_cast<const uint8_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kBool: { auto p = static_cast<const uint8_t*>(src); each([&](size_t i) { return p[i] ? 1.0f : 0.0f; }); return; }
    case DType::kU16: { auto p = static_cast<const uint16_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kU32: { auto p = static_cast<const uint32_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
    case DType::kU64: { auto p = static_cast<const uint64_t*>(src); each([&](size_t i) { return static_cast<float>(p[i]); }); return; }
  }
}

void convert_from_f32(DType to, const float* src, void* dst, size_t n) {
  switch (to) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kF64: { auto p = static_cast<double*>(dst); for (size_t i = 0; i < n; ++i) p[i] = src[i]; return; }
    case DType::kF16: { auto p = static_cast<uint16_t*>(dst); for (size_t i = 0; i < n; ++i) p[i] = f32_to_f16(src[i]); return; }
    case DType::kBF16: { auto p = static_cast<uint16_t*>(dst); for (size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(src[i]); return; }
    default: throw_error(strprintf("cannot convert f32 to %s", std::string(dtype_name(to)).c_str()));
  }
}

}  // namespace distllm
