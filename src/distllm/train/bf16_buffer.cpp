#include "distllm/train/bf16_buffer.h"

#include <algorithm>

#include "distllm/base/parallel.h"
#include "distllm/tensor/dtype.h"

namespace distllm {
namespace {

constexpr int64_t kChunk = 1 << 16;

template <typename Fn>
void chunked(int64_t n, Fn&& fn) {
  parallel_for(0, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    int64_t lo = c * kChunk;
    fn(lo, std::min(n, lo + kChunk));
  });
}

}  // namespace

void f32_to_bf16_buffer(const float* src, uint16_t* dst, int64_t n) {
  chunked(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = f32_to_bf16(src[i]);
  });
}

void bf16_to_f32_buffer(const uint16_t* src, float* dst, int64_t n) {
  chunked(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = bf16_to_f32(src[i]);
  });
}

void bf16_accumulate_f32(const uint16_t* src, float* dst, int64_t n) {
  chunked(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] += bf16_to_f32(src[i]);
  });
}

void round_to_bf16(const float* src, float* dst, int64_t n) {
  chunked(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
  });
}

}  // namespace distllm
