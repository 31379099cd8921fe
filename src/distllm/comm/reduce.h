// Element-wise reduction and copy kernels used by the backends.
//
// The shared-memory backend reduces a slice by reading every rank's copy once and
// writing the result once: reduce_sources() takes all n source pointers at once and
// keeps the running value in registers (f32 registers for bf16/f16), so an n-way
// reduction costs one pass over memory and one rounding, not n-1 pairwise passes.
#pragma once

#include <cstddef>

#include "distllm/comm/types.h"

namespace distllm::comm {

// out[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) for i < count. kAvg divides the sum
// by `avg_divisor` (the group size). out may be exactly one of the sources (in
// place); other overlaps are not allowed. `streaming` asks for non-temporal stores
// (for outputs far larger than the caches: no read-for-ownership, no cache
// pollution). With `widen_to_f32`, bf16/f16 sources produce f32 output without
// rounding (the hierarchical backend keeps partial sums in f32 between levels).
void reduce_sources(void* out, const void* const* srcs, int nsrc, size_t count, DType dtype,
                    ReduceOp op, int avg_divisor, bool streaming = false, bool widen_to_f32 = false);

// memcpy, or non-temporal stores when `streaming` (falls back to memcpy when the
// CPU lacks AVX2); a streaming copy ends with a store fence. reduce_sources() with
// `streaming` does not: callers call store_fence() once after the last one.
void copy_bytes(void* dst, const void* src, size_t bytes, bool streaming = false);
void store_fence();

// Converts bf16/f16 to f32 and back (round to nearest even), dividing by `divisor`
// on the way back when it is > 1 (kAvg). For f32/f64/integers `divide_in_place`
// applies the kAvg rule (exact division / truncation toward zero).
void widen_to_f32(const void* src, DType dtype, float* dst, size_t count);
void narrow_from_f32(const float* src, DType dtype, void* dst, size_t count, int divisor);
void divide_in_place(void* data, size_t count, DType dtype, int divisor);

namespace detail {
// Scalar references (always available) and AVX2 versions (call only if use_avx2()).
// Elements [begin, end) only (pointers are not offset).
void reduce_scalar_range(void* out, const void* const* srcs, int nsrc, size_t begin, size_t end, DType dtype,
                         ReduceOp op, int avg_divisor, bool widen_to_f32);
void reduce_scalar(void* out, const void* const* srcs, int nsrc, size_t count, DType dtype, ReduceOp op,
                   int avg_divisor, bool widen_to_f32);
void reduce_avx2(void* out, const void* const* srcs, int nsrc, size_t count, DType dtype, ReduceOp op,
                 int avg_divisor, bool streaming, bool widen_to_f32);
void copy_stream_avx2(void* dst, const void* src, size_t bytes);
void store_fence_avx2();
}  // namespace detail

}  // namespace distllm::comm
