// A block's row-wise parts by kind (block_spec.h): the one place that maps a
// family's norm and MLP activation onto kernels, for training and inference alike.
// Backward accumulates (+=) into the input and parameter gradients, as the kernels do.
#pragma once

#include <cstdint>

#include "distllm/model/block_spec.h"

namespace distllm {

// out = norm(in) over `rows` rows of C; mean and rstd per row are saved for
// backward (mean only for LayerNorm; pass null at inference). `bias` is LayerNorm's.
void block_norm_forward(NormKind kind, float* out, float* mean, float* rstd, const float* in, const float* weight,
                        const float* bias, int64_t rows, int C, float eps);
void block_norm_backward(NormKind kind, float* din, float* dweight, float* dbias, const float* dout, const float* in,
                         const float* weight, const float* mean, const float* rstd, int64_t rows, int C);

// The value of a norm weight that leaves a normalised row unchanged: 1, or 0 for
// kRmsNormPlusOne (whose rows are scaled by 1 + w). Initialisation starts there.
inline float identity_norm_weight(NormKind kind) { return kind == NormKind::kRmsNormPlusOne ? 0.0f : 1.0f; }

// act [rows, I] from the MLP's input projection `in` [rows, I] (or gate|up [rows, 2I]).
void mlp_activation_forward(MlpKind kind, float* act, const float* in, int64_t rows, int I);
// d(in) (overwritten) from d(act).
void mlp_activation_backward(MlpKind kind, float* din, const float* in, const float* dact, int64_t rows, int I);

}  // namespace distllm
