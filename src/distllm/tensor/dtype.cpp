#include "distllm/tensor/dtype.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/strings.h"

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
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

const char* dtype_short_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kU16: return "u16";
    case DType::kU32: return "u32";
    case DType::kU64: return "u64";
  }
  return "?";
}

const char* dtype_nccl_name(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kF16: return "half";
    case DType::kBF16: return "bfloat16";
    case DType::kI64: return "int64";
    case DType::kI32: return "int32";
    case DType::kI16: return "int16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kU16: return "uint16";
    case DType::kU32: return "uint32";
    case DType::kU64: return "uint64";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  if (std::optional<DType> t = dtype_from_name(text)) return *t;
  for (DType t : kAllDTypes)
    if (text == dtype_short_name(t) || text == dtype_nccl_name(t)) return t;
  if (text == "float32") return DType::kF32;
  if (text == "float64") return DType::kF64;
  if (text == "float16") return DType::kF16;
  throw_error(strprintf("unknown dtype '%s' (expected one of f32, f64, f16, bf16, i64, i32, i16, i8, u8, bool, u16, "
                        "u32, u64, or their safetensors or nccl-tests spellings)",
                        std::string(text).c_str()));
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
  uint32_t a;
  std::memcpy(&a, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((a >> 16) & 0x8000u);
  a &= 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero): round a * 2^24 to an integer, ties to even.
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);  // 14..24 (value = mant * 2^(e-150))
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15), round the mantissa from 23 to 10 bits;
  // a carry moves into the exponent, as it should.
  uint32_t r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
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

namespace {

// First element of [0, n) whose exponent bits are all ones (NaN or infinity): chunks
// are tested with a branch-free OR (vectorised), only a hit chunk is searched.
template <typename Bits>
int64_t first_all_ones_exponent(const Bits* x, size_t n, Bits exponent) {
  constexpr size_t kChunk = size_t{1} << 16;
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  std::atomic<int64_t> first{INT64_MAX};
  parallel_for(0, chunks, [&](int64_t c) {
    const size_t lo = static_cast<size_t>(c) * kChunk, hi = std::min(n, lo + kChunk);
    bool any = false;
    for (size_t i = lo; i < hi; ++i) any |= (x[i] & exponent) == exponent;
    if (!any) return;
    for (size_t i = lo; i < hi; ++i) {
      if ((x[i] & exponent) != exponent) continue;
      int64_t seen = first.load();
      while (static_cast<int64_t>(i) < seen && !first.compare_exchange_weak(seen, static_cast<int64_t>(i))) {
      }
      return;
    }
  });
  return first.load() == INT64_MAX ? -1 : first.load();
}

}  // namespace

int64_t first_non_finite(DType t, const void* data, size_t n) {
  switch (t) {
    case DType::kF32: return first_all_ones_exponent(static_cast<const uint32_t*>(data), n, uint32_t{0x7F800000});
    case DType::kF64:
      return first_all_ones_exponent(static_cast<const uint64_t*>(data), n, uint64_t{0x7FF0000000000000});
    case DType::kF16: return first_all_ones_exponent(static_cast<const uint16_t*>(data), n, uint16_t{0x7C00});
    case DType::kBF16: return first_all_ones_exponent(static_cast<const uint16_t*>(data), n, uint16_t{0x7F80});
    default: return -1;
  }
}

}  // namespace distllm
