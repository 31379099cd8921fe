// Token (+ learned position) embedding lookup and its backward.
#pragma once

#include <cstdint>

namespace distllm::kernels {

// out[n, :] = wte[tokens[n], :] (+ wpe[positions[n], :] when wpe is not null).
// Token ids must already be validated to lie in [0, vocab). A negative id names no
// row of this table (with tensor parallelism, a row another rank's vocabulary slice
// holds): its token part is zero, and backward skips it.
void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                       const float* wpe, int64_t N, int C);
// dwte[tokens[n]] += dout[n]; dwpe[positions[n]] += dout[n] (when dwpe not null).
// Parallel over channel blocks, so the summation order is fixed for any thread count.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int C);

}  // namespace distllm::kernels
