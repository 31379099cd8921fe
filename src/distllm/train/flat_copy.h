// Copying and zeroing ranges of the flat training state (parameters, gradients,
// moments: up to gigabytes), the zeroing split over the threads. Empty ranges are
// fine (a rank may own nothing).
#pragma once

#include <cstdint>

namespace distllm {

void copy_floats(float* dst, const float* src, int64_t n);
void fill_zero(float* p, int64_t n);

}  // namespace distllm
