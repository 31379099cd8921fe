#include "distllm/kernels/embedding.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/parallel.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels {

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                       const float* wpe, int64_t N, int C) {
  parallel_for(0, N, [&](int64_t n) {
    float* o = out + n * C;
    if (tokens[n] < 0) {
      if (wpe)
        std::memcpy(o, wpe + static_cast<int64_t>(positions[n]) * C, sizeof(float) * C);
      else
        std::memset(o, 0, sizeof(float) * C);
      return;
    }
    const float* t = wte + static_cast<int64_t>(tokens[n]) * C;
    if (wpe) {
      add(o, t, wpe + static_cast<int64_t>(positions[n]) * C, C);
    } else {
      std::memcpy(o, t, sizeof(float) * C);
    }
  });
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int C) {
  constexpr int kBlock = 64;
  int64_t blocks = (C + kBlock - 1) / kBlock;
  parallel_for(0, blocks, [&](int64_t b) {
    int c0 = static_cast<int>(b) * kBlock;
    int len = std::min(C, c0 + kBlock) - c0;
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * C + c0;
      if (tokens[n] >= 0) add_inplace(dwte + static_cast<int64_t>(tokens[n]) * C + c0, d, len);
      if (dwpe) add_inplace(dwpe + static_cast<int64_t>(positions[n]) * C + c0, d, len);
    }
  });
}

}  // namespace distllm::kernels
