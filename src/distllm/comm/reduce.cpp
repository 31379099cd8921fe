#include "distllm/comm/reduce.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"

namespace distllm::comm {
namespace {

// Integer arithmetic wraps (two's complement) as it does on the wire in NCCL/MPI;
// doing it in the unsigned type keeps it defined behaviour in C++.
template <typename T>
struct Wrap {
  using U = std::make_unsigned_t<T>;
  static T add(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  static T mul(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
};

template <typename T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return Wrap<T>::add(a, b);
      case ReduceOp::kProd: return Wrap<T>::mul(a, b);
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kMin: return a < b ? a : b;
    }
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return a + b;
      case ReduceOp::kProd: return a * b;
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kMin: return a < b ? a : b;
    }
  }
  return a;
}

template <typename T>
T finish(T v, ReduceOp op, int divisor) {
  if (op != ReduceOp::kAvg || divisor <= 1) return v;
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v / static_cast<T>(divisor));
  } else {
    return v / static_cast<T>(divisor);
  }
}

// Element access through memcpy: callers may pass buffers that are not aligned
// to the element size (byte offsets into packed messages).
template <typename T>
T load_at(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store_at(void* base, size_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(base) + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
void reduce_plain(void* out, const void* const* srcs, int nsrc, size_t begin, size_t end, ReduceOp op, int div) {
  for (size_t i = begin; i < end; ++i) {
    T acc = load_at<T>(srcs[0], i);
    for (int j = 1; j < nsrc; ++j) acc = combine(acc, load_at<T>(srcs[j], i), op);
    store_at<T>(out, i, finish(acc, op, div));
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void reduce_half(void* out, const void* const* srcs, int nsrc, size_t begin, size_t end, ReduceOp op,
                 int div, bool widen) {
  for (size_t i = begin; i < end; ++i) {
    float acc = ToF(load_at<uint16_t>(srcs[0], i));
    for (int j = 1; j < nsrc; ++j) acc = combine(acc, ToF(load_at<uint16_t>(srcs[j], i)), op);
    acc = finish(acc, op, div);
    if (widen)
      store_at<float>(out, i, acc);
    else
      store_at<uint16_t>(out, i, FromF(acc));
  }
}

}  // namespace

namespace detail {

void reduce_scalar_range(void* out, const void* const* srcs, int nsrc, size_t begin, size_t end, DType dtype,
                         ReduceOp op, int div, bool widen) {
  switch (dtype) {
    case DType::kF32: return reduce_plain<float>(out, srcs, nsrc, begin, end, op, div);
    case DType::kF64: return reduce_plain<double>(out, srcs, nsrc, begin, end, op, div);
    case DType::kI32: return reduce_plain<int32_t>(out, srcs, nsrc, begin, end, op, div);
    case DType::kI64: return reduce_plain<int64_t>(out, srcs, nsrc, begin, end, op, div);
    case DType::kU8: return reduce_plain<uint8_t>(out, srcs, nsrc, begin, end, op, div);
    case DType::kBF16: return reduce_half<bf16_to_f32, f32_to_bf16>(out, srcs, nsrc, begin, end, op, div, widen);
    case DType::kF16: return reduce_half<f16_to_f32, f32_to_f16>(out, srcs, nsrc, begin, end, op, div, widen);
    default: check_collective_dtype(dtype);
  }
}

void reduce_scalar(void* out, const void* const* srcs, int nsrc, size_t count, DType dtype, ReduceOp op,
                   int div, bool widen) {
  reduce_scalar_range(out, srcs, nsrc, 0, count, dtype, op, div, widen);
}

}  // namespace detail

void reduce_sources(void* out, const void* const* srcs, int nsrc, size_t count, DType dtype, ReduceOp op,
                    int avg_divisor, bool streaming, bool widen) {
  DL_ASSERT(nsrc >= 1);
  if (count == 0) return;
  widen = widen && (dtype == DType::kBF16 || dtype == DType::kF16);
  if (use_avx2()) {
    detail::reduce_avx2(out, srcs, nsrc, count, dtype, op, avg_divisor, streaming, widen);
  } else {
    detail::reduce_scalar(out, srcs, nsrc, count, dtype, op, avg_divisor, widen);
  }
}

void copy_bytes(void* dst, const void* src, size_t bytes, bool streaming) {
  if (bytes == 0 || dst == src) return;
  if (streaming && use_avx2()) {
    detail::copy_stream_avx2(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void store_fence() {
  if (use_avx2()) detail::store_fence_avx2();
}

void widen_to_f32(const void* src, DType dtype, float* dst, size_t count) {
  DL_ASSERT(dtype == DType::kBF16 || dtype == DType::kF16);
  for (size_t i = 0; i < count; ++i) {
    uint16_t h = load_at<uint16_t>(src, i);
    dst[i] = dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

void narrow_from_f32(const float* src, DType dtype, void* dst, size_t count, int divisor) {
  DL_ASSERT(dtype == DType::kBF16 || dtype == DType::kF16);
  const float div = static_cast<float>(divisor > 1 ? divisor : 1);
  for (size_t i = 0; i < count; ++i) {
    float v = divisor > 1 ? src[i] / div : src[i];
    store_at<uint16_t>(dst, i, dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v));
  }
}

namespace {
template <typename T>
void divide_typed(void* p, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) store_at<T>(p, i, finish(load_at<T>(p, i), ReduceOp::kAvg, divisor));
}
}  // namespace

void divide_in_place(void* data, size_t count, DType dtype, int divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case DType::kF32: return divide_typed<float>(data, count, divisor);
    case DType::kF64: return divide_typed<double>(data, count, divisor);
    case DType::kI32: return divide_typed<int32_t>(data, count, divisor);
    case DType::kI64: return divide_typed<int64_t>(data, count, divisor);
    case DType::kU8: return divide_typed<uint8_t>(data, count, divisor);
    case DType::kBF16:
    case DType::kF16: {
      for (size_t i = 0; i < count; ++i) {
        uint16_t h = load_at<uint16_t>(data, i);
        if (dtype == DType::kBF16)
          h = f32_to_bf16(bf16_to_f32(h) / static_cast<float>(divisor));
        else
          h = f32_to_f16(f16_to_f32(h) / static_cast<float>(divisor));
        store_at<uint16_t>(data, i, h);
      }
      return;
    }
    default: check_collective_dtype(dtype);
  }
}

}  // namespace distllm::comm
