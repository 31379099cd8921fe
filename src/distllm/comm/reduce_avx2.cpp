// AVX2 versions of the reduction and streaming-copy kernels (see reduce.h). Every
// dtype keeps its running value in registers: f32 lanes for f32/bf16/f16, f64 for
// f64, integer lanes for integers. Operations AVX2 lacks (64-bit and 8-bit
// multiply) use the scalar reference.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "distllm/comm/reduce.h"

namespace distllm::comm::detail {
namespace {

// ---- element kinds: load W elements into one register, store one register back ----

struct F32K {
  using V = __m256;
  static constexpr size_t W = 8;
  static V load(const void* p, size_t i) { return _mm256_loadu_ps(static_cast<const float*>(p) + i); }
  static void store(void* p, size_t i, V v) { _mm256_storeu_ps(static_cast<float*>(p) + i, v); }
  static void stream(void* p, size_t i, V v) { _mm256_stream_ps(static_cast<float*>(p) + i, v); }
  static size_t out_bytes() { return 4; }
};

struct F64K {
  using V = __m256d;
  static constexpr size_t W = 4;
  static V load(const void* p, size_t i) { return _mm256_loadu_pd(static_cast<const double*>(p) + i); }
  static void store(void* p, size_t i, V v) { _mm256_storeu_pd(static_cast<double*>(p) + i, v); }
  static void stream(void* p, size_t i, V v) { _mm256_stream_pd(static_cast<double*>(p) + i, v); }
  static size_t out_bytes() { return 8; }
};

inline __m128i bf16_round(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF)),
                                            _mm256_set1_epi32(0x7F800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(b, _mm256_set1_epi32(0x00400000)), is_nan);
  r = _mm256_srli_epi32(r, 16);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8));
}

struct BF16K {
  using V = __m256;
  static constexpr size_t W = 8;
  static V load(const void* p, size_t i) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void store(void* p, size_t i, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), bf16_round(v));
  }
  static void stream(void* p, size_t i, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), bf16_round(v));
  }
  static size_t out_bytes() { return 2; }
};

struct F16K {
  using V = __m256;
  static constexpr size_t W = 8;
  static V load(const void* p, size_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  }
  static void store(void* p, size_t i, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void stream(void* p, size_t i, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static size_t out_bytes() { return 2; }
};

// bf16/f16 sources reduced into f32 output (no rounding).
template <class Src>
struct WidenK {
  using V = __m256;
  static constexpr size_t W = 8;
  static V load(const void* p, size_t i) { return Src::load(p, i); }
  static void store(void* p, size_t i, V v) { F32K::store(p, i, v); }
  static void stream(void* p, size_t i, V v) { F32K::stream(p, i, v); }
  static size_t out_bytes() { return 4; }
};

template <typename T>
struct IntK {
  using V = __m256i;
  static constexpr size_t W = 32 / sizeof(T);
  static V load(const void* p, size_t i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const T*>(p) + i));
  }
  static void store(void* p, size_t i, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<T*>(p) + i), v); }
  static void stream(void* p, size_t i, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(static_cast<T*>(p) + i), v); }
  static size_t out_bytes() { return sizeof(T); }
};

// ---- combine two registers under an operator ----

template <ReduceOp OP>
inline __m256 combine(__m256 a, __m256 b) {
  if constexpr (OP == ReduceOp::kSum || OP == ReduceOp::kAvg) return _mm256_add_ps(a, b);
  if constexpr (OP == ReduceOp::kProd) return _mm256_mul_ps(a, b);
  if constexpr (OP == ReduceOp::kMax) return _mm256_max_ps(a, b);
  if constexpr (OP == ReduceOp::kMin) return _mm256_min_ps(a, b);
}
template <ReduceOp OP>
inline __m256d combine(__m256d a, __m256d b) {
  if constexpr (OP == ReduceOp::kSum || OP == ReduceOp::kAvg) return _mm256_add_pd(a, b);
  if constexpr (OP == ReduceOp::kProd) return _mm256_mul_pd(a, b);
  if constexpr (OP == ReduceOp::kMax) return _mm256_max_pd(a, b);
  if constexpr (OP == ReduceOp::kMin) return _mm256_min_pd(a, b);
}

template <typename T, ReduceOp OP>
constexpr bool int_vectorised() {
  if constexpr (OP == ReduceOp::kProd) return sizeof(T) == 4;  // no 8/64-bit lane multiply in AVX2
  return true;
}

template <typename T, ReduceOp OP>
inline __m256i combine_int(__m256i a, __m256i b) {
  if constexpr (OP == ReduceOp::kSum || OP == ReduceOp::kAvg) {
    if constexpr (sizeof(T) == 1) return _mm256_add_epi8(a, b);
    if constexpr (sizeof(T) == 4) return _mm256_add_epi32(a, b);
    if constexpr (sizeof(T) == 8) return _mm256_add_epi64(a, b);
  }
  if constexpr (OP == ReduceOp::kProd) return _mm256_mullo_epi32(a, b);
  if constexpr (OP == ReduceOp::kMax) {
    if constexpr (sizeof(T) == 1) return _mm256_max_epu8(a, b);
    if constexpr (sizeof(T) == 4) return _mm256_max_epi32(a, b);
    if constexpr (sizeof(T) == 8) return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
  }
  if constexpr (OP == ReduceOp::kMin) {
    if constexpr (sizeof(T) == 1) return _mm256_min_epu8(a, b);
    if constexpr (sizeof(T) == 4) return _mm256_min_epi32(a, b);
    if constexpr (sizeof(T) == 8) return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
  }
}

template <class K>
struct FloatCombiner {
  template <ReduceOp OP>
  static typename K::V apply(typename K::V a, typename K::V b) { return combine<OP>(a, b); }
};
template <typename T>
struct IntCombiner {
  template <ReduceOp OP>
  static __m256i apply(__m256i a, __m256i b) { return combine_int<T, OP>(a, b); }
};

inline __m256 divide(__m256 v, int d) { return _mm256_div_ps(v, _mm256_set1_ps(static_cast<float>(d))); }
inline __m256d divide(__m256d v, int d) { return _mm256_div_pd(v, _mm256_set1_pd(static_cast<double>(d))); }

// Vector body over [begin, end) with end - begin a multiple of K::W. Four
// independent accumulators per iteration hide the add latency.
template <class K, class C, ReduceOp OP, bool kFloatDivide, bool kStream>
void body(void* out, const void* const* srcs, int n, size_t begin, size_t end, int div) {
  using V = typename K::V;
  constexpr size_t W = K::W;
  auto put = [&](size_t i, V v) {
    if constexpr (kFloatDivide) v = divide(v, div);
    if constexpr (kStream) K::stream(out, i, v); else K::store(out, i, v);
  };
  size_t i = begin;
  for (; i + 4 * W <= end; i += 4 * W) {
    V a0 = K::load(srcs[0], i), a1 = K::load(srcs[0], i + W);
    V a2 = K::load(srcs[0], i + 2 * W), a3 = K::load(srcs[0], i + 3 * W);
    for (int j = 1; j < n; ++j) {
      a0 = C::template apply<OP>(a0, K::load(srcs[j], i));
      a1 = C::template apply<OP>(a1, K::load(srcs[j], i + W));
      a2 = C::template apply<OP>(a2, K::load(srcs[j], i + 2 * W));
      a3 = C::template apply<OP>(a3, K::load(srcs[j], i + 3 * W));
    }
    put(i, a0);
    put(i + W, a1);
    put(i + 2 * W, a2);
    put(i + 3 * W, a3);
  }
  for (; i + W <= end; i += W) {
    V a = K::load(srcs[0], i);
    for (int j = 1; j < n; ++j) a = C::template apply<OP>(a, K::load(srcs[j], i));
    put(i, a);
  }
}

template <class K, class C, ReduceOp OP, bool kFloatDivide>
void run(void* out, const void* const* srcs, int n, size_t count, DType dtype, int div, bool streaming,
         bool widen) {
  constexpr size_t W = K::W;
  const size_t esize = K::out_bytes();
  // Peel scalar elements until the output is aligned for non-temporal stores.
  size_t head = 0;
  const size_t align = W * esize;  // 32 bytes, or 16 for bf16/f16 outputs
  const auto addr = reinterpret_cast<uintptr_t>(out);
  if (streaming && addr % esize == 0) {
    while (head < count && (addr + head * esize) % align != 0) ++head;
  } else {
    streaming = false;
  }
  size_t vec_end = head + (count - head) / W * W;
  if (head > 0) reduce_scalar_range(out, srcs, n, 0, head, dtype, OP, div, widen);
  if (streaming)
    body<K, C, OP, kFloatDivide, true>(out, srcs, n, head, vec_end, div);
  else
    body<K, C, OP, kFloatDivide, false>(out, srcs, n, head, vec_end, div);
  if (vec_end < count) reduce_scalar_range(out, srcs, n, vec_end, count, dtype, OP, div, widen);
}

template <class K, ReduceOp OP>
void run_float(void* out, const void* const* srcs, int n, size_t count, DType dtype, int div, bool streaming,
               bool widen) {
  if (OP == ReduceOp::kAvg && div > 1)
    run<K, FloatCombiner<K>, OP, true>(out, srcs, n, count, dtype, div, streaming, widen);
  else
    run<K, FloatCombiner<K>, OP, false>(out, srcs, n, count, dtype, div, streaming, widen);
}

template <class K>
void dispatch_float(void* out, const void* const* srcs, int n, size_t count, DType dtype, ReduceOp op, int div,
                    bool streaming, bool widen) {
  switch (op) {
    case ReduceOp::kSum: return run_float<K, ReduceOp::kSum>(out, srcs, n, count, dtype, div, streaming, widen);
    case ReduceOp::kAvg: return run_float<K, ReduceOp::kAvg>(out, srcs, n, count, dtype, div, streaming, widen);
    case ReduceOp::kMax: return run_float<K, ReduceOp::kMax>(out, srcs, n, count, dtype, div, streaming, widen);
    case ReduceOp::kMin: return run_float<K, ReduceOp::kMin>(out, srcs, n, count, dtype, div, streaming, widen);
    case ReduceOp::kProd: return run_float<K, ReduceOp::kProd>(out, srcs, n, count, dtype, div, streaming, widen);
  }
}

template <typename T, ReduceOp OP>
void run_int(void* out, const void* const* srcs, int n, size_t count, DType dtype, int div, bool streaming) {
  if constexpr (!int_vectorised<T, OP>()) {
    reduce_scalar_range(out, srcs, n, 0, count, dtype, OP, div, false);
  } else {
    // Integer kAvg: wrapping sum in vectors, then the truncating division pass.
    run<IntK<T>, IntCombiner<T>, OP == ReduceOp::kAvg ? ReduceOp::kSum : OP, false>(out, srcs, n, count, dtype, div,
                                                                                    streaming, false);
    if (OP == ReduceOp::kAvg) divide_in_place(out, count, dtype, div);
  }
}

template <typename T>
void dispatch_int(void* out, const void* const* srcs, int n, size_t count, DType dtype, ReduceOp op, int div,
                  bool streaming) {
  switch (op) {
    case ReduceOp::kSum: return run_int<T, ReduceOp::kSum>(out, srcs, n, count, dtype, div, streaming);
    case ReduceOp::kAvg: return run_int<T, ReduceOp::kAvg>(out, srcs, n, count, dtype, div, streaming);
    case ReduceOp::kMax: return run_int<T, ReduceOp::kMax>(out, srcs, n, count, dtype, div, streaming);
    case ReduceOp::kMin: return run_int<T, ReduceOp::kMin>(out, srcs, n, count, dtype, div, streaming);
    case ReduceOp::kProd: return run_int<T, ReduceOp::kProd>(out, srcs, n, count, dtype, div, streaming);
  }
}

}  // namespace

void reduce_avx2(void* out, const void* const* srcs, int n, size_t count, DType dtype, ReduceOp op, int div,
                 bool streaming, bool widen) {
  switch (dtype) {
    case DType::kF32: return dispatch_float<F32K>(out, srcs, n, count, dtype, op, div, streaming, false);
    case DType::kF64: return dispatch_float<F64K>(out, srcs, n, count, dtype, op, div, streaming, false);
    case DType::kBF16:
      if (widen) return dispatch_float<WidenK<BF16K>>(out, srcs, n, count, dtype, op, div, streaming, true);
      return dispatch_float<BF16K>(out, srcs, n, count, dtype, op, div, streaming, false);
    case DType::kF16:
      if (widen) return dispatch_float<WidenK<F16K>>(out, srcs, n, count, dtype, op, div, streaming, true);
      return dispatch_float<F16K>(out, srcs, n, count, dtype, op, div, streaming, false);
    case DType::kI32: return dispatch_int<int32_t>(out, srcs, n, count, dtype, op, div, streaming);
    case DType::kI64: return dispatch_int<int64_t>(out, srcs, n, count, dtype, op, div, streaming);
    case DType::kU8: return dispatch_int<uint8_t>(out, srcs, n, count, dtype, op, div, streaming);
    default: check_collective_dtype(dtype);
  }
}

void copy_stream_avx2(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  size_t head = (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();  // non-temporal stores are weakly ordered: publish them before returning
}

void store_fence_avx2() { _mm_sfence(); }

}  // namespace distllm::comm::detail
