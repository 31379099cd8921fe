#include "distllm/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "distllm/base/parallel.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/matmul.h"
#include "distllm/kernels/vec.h"
#include "distllm/base/cpu.h"

namespace distllm::kernels {
namespace {

constexpr int kTile = 64;  // query rows per tile

// Row r of a score tile covers keys [0, visible); later keys are masked.
inline int visible_keys(const AttentionArgs& a, int query_row) {
  const int64_t offset = a.query_offset >= 0 ? a.query_offset : a.kv_len - a.q_len;
  return static_cast<int>(std::clamp<int64_t>(offset + query_row + 1, 0, a.kv_len));
}

struct TilePtrs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
};

TilePtrs tile_ptrs(const AttentionArgs& a, int b, int h, int i0) {
  int g = h / (a.n_head / a.n_kv_head);
  TilePtrs p;
  p.q = a.q + b * a.q_batch_stride + i0 * a.q_row_stride + static_cast<int64_t>(h) * a.head_dim;
  p.k = a.k + b * a.kv_batch_stride + static_cast<int64_t>(g) * a.head_dim;
  p.v = a.v + b * a.kv_batch_stride + static_cast<int64_t>(g) * a.head_dim;
  p.out = a.out + b * a.out_batch_stride + i0 * a.out_row_stride + static_cast<int64_t>(h) * a.head_dim;
  return p;
}

// S[rows, cols] = scale * Q_tile · K[0:cols]^T
void scores(const AttentionArgs& a, const TilePtrs& p, int rows, int cols, float* S) {
  f32_gemm(false, true, rows, cols, a.head_dim, a.scale, p.q, a.q_row_stride, p.k, a.kv_row_stride, 0.0f, S, cols);
}

void forward_tile(const AttentionArgs& a, int b, int h, int i0, float* S) {
  int rows = std::min(kTile, a.q_len - i0);
  int cols = visible_keys(a, i0 + rows - 1);
  TilePtrs p = tile_ptrs(a, b, h, i0);
  scores(a, p, rows, cols, S);
  for (int r = 0; r < rows; ++r) {
    float* row = S + static_cast<int64_t>(r) * cols;
    int vis = visible_keys(a, i0 + r);
    float lse = softmax_inplace(row, vis);
    std::memset(row + vis, 0, sizeof(float) * (cols - vis));
    if (a.lse) a.lse[(static_cast<int64_t>(b) * a.n_head + h) * a.q_len + i0 + r] = lse;
  }
  f32_gemm(false, false, rows, a.head_dim, cols, 1.0f, S, cols, p.v, a.kv_row_stride, 0.0f, p.out, a.out_row_stride);
}

}  // namespace

void attention_forward(const AttentionArgs& a) {
  int tiles = (a.q_len + kTile - 1) / kTile;
  int64_t tasks = static_cast<int64_t>(a.batch) * a.n_head * tiles;
  std::vector<std::vector<float>> scratch(num_threads());
  parallel_chunks(0, tasks, [&](int64_t lo, int64_t hi, int thread) {
    std::vector<float>& S = scratch[thread];
    S.resize(static_cast<size_t>(kTile) * a.kv_len);
    for (int64_t t = lo; t < hi; ++t) {
      int tile = static_cast<int>(t % tiles);
      int h = static_cast<int>((t / tiles) % a.n_head);
      int b = static_cast<int>(t / tiles / a.n_head);
      forward_tile(a, b, h, tile * kTile, S.data());
    }
  });
}

void attention_backward(const AttentionArgs& a, const AttentionGrads& g) {
  const int D = a.head_dim;
  const int T = a.q_len;
  const int group = a.n_head / a.n_kv_head;
  int64_t tasks = static_cast<int64_t>(a.batch) * a.n_kv_head;
  std::vector<std::vector<float>> scratch(num_threads());
  bool simd = use_avx2();
  parallel_chunks(0, tasks, [&](int64_t lo, int64_t hi, int thread) {
    std::vector<float>& buf = scratch[thread];
    buf.resize(2 * static_cast<size_t>(kTile) * a.kv_len);
    float* P = buf.data();
    float* dP = P + static_cast<size_t>(kTile) * a.kv_len;
    for (int64_t task = lo; task < hi; ++task) {
      int b = static_cast<int>(task / a.n_kv_head);
      int kvh = static_cast<int>(task % a.n_kv_head);
      float* dk = g.dk + b * a.kv_batch_stride + static_cast<int64_t>(kvh) * D;
      float* dv = g.dv + b * a.kv_batch_stride + static_cast<int64_t>(kvh) * D;
      for (int t = 0; t < a.kv_len && !g.accumulate; ++t) {
        std::memset(dk + t * a.kv_row_stride, 0, sizeof(float) * D);
        std::memset(dv + t * a.kv_row_stride, 0, sizeof(float) * D);
      }
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int i0 = 0; i0 < T; i0 += kTile) {
          int rows = std::min(kTile, T - i0);
          int cols = visible_keys(a, i0 + rows - 1);
          TilePtrs p = tile_ptrs(a, b, h, i0);
          const float* dout = g.dout + b * a.out_batch_stride + i0 * a.out_row_stride + static_cast<int64_t>(h) * D;
          float* dq = g.dq + b * a.q_batch_stride + i0 * a.q_row_stride + static_cast<int64_t>(h) * D;
          const float* lse = a.lse + (static_cast<int64_t>(b) * a.n_head + h) * T + i0;
          const float* delta = g.delta ? g.delta + (static_cast<int64_t>(b) * a.n_head + h) * T + i0 : nullptr;
          // P = exp(scale * Q K^T - lse), masked.
          scores(a, p, rows, cols, P);
          for (int r = 0; r < rows; ++r) {
            float* row = P + static_cast<int64_t>(r) * cols;
            int vis = visible_keys(a, i0 + r);
            (simd ? avx2::softmax_from_lse : scalar::softmax_from_lse)(row, lse[r], 1.0f, vis);
            std::memset(row + vis, 0, sizeof(float) * (cols - vis));
          }
          // dP = dO · V^T
          f32_gemm(false, true, rows, cols, D, 1.0f, dout, a.out_row_stride, p.v, a.kv_row_stride, 0.0f, dP, cols);
          // dS = P * (dP - sum_j P_j dP_j), written over dP. The row sum is taken
          // from P and dP themselves (not as dO . O, which is equal in exact
          // arithmetic), so a row with one visible key gets exactly zero.
          for (int r = 0; r < rows; ++r) {
            float* prow = P + static_cast<int64_t>(r) * cols;
            float* drow = dP + static_cast<int64_t>(r) * cols;
            int vis = visible_keys(a, i0 + r);
            float di = delta ? delta[r] : dot(prow, drow, vis);
            for (int j = 0; j < vis; ++j) drow[j] = prow[j] * (drow[j] - di);
            std::memset(drow + vis, 0, sizeof(float) * (cols - vis));
          }
          // dV[0:cols] += P^T · dO
          f32_gemm(true, false, cols, D, rows, 1.0f, P, cols, dout, a.out_row_stride, 1.0f, dv, a.kv_row_stride);
          // dQ_tile = scale * dS · K[0:cols]
          f32_gemm(false, false, rows, D, cols, a.scale, dP, cols, p.k, a.kv_row_stride, g.accumulate ? 1.0f : 0.0f, dq,
                   a.q_row_stride);
          // dK[0:cols] += scale * dS^T · Q_tile
          f32_gemm(true, false, cols, D, rows, a.scale, dP, cols, p.q, a.q_row_stride, 1.0f, dk, a.kv_row_stride);
        }
      }
    }
  });
}

}  // namespace distllm::kernels
