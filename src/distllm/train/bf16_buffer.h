// f32 <-> bf16 conversion of large buffers for reduced-precision communication,
// split over the threads (the codec itself is tensor/dtype.h's).
#pragma once

#include <cstdint>

namespace distllm {

void f32_to_bf16_buffer(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_buffer(const uint16_t* src, float* dst, int64_t n);
// dst[i] += bf16 src[i]
void bf16_accumulate_f32(const uint16_t* src, float* dst, int64_t n);
// Rounds every value to the nearest bf16 (kept as f32).
void round_to_bf16(const float* src, float* dst, int64_t n);

}  // namespace distllm
