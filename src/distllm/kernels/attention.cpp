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

// The keys query row r sees: [lo, hi) (empty when a window lies wholly before
// this block of keys).
struct KeyRange {
  int lo, hi;
  int size() const { return std::max(0, hi - lo); }
};
inline KeyRange visible_keys(const AttentionArgs& a, int query_row) {
  const int64_t offset = a.query_offset >= 0 ? a.query_offset : a.kv_len - a.q_len;
  const int64_t pos = offset + query_row;
  const int hi = static_cast<int>(std::clamp<int64_t>(pos + 1, 0, a.kv_len));
  const int lo = a.window > 0 ? static_cast<int>(std::clamp<int64_t>(pos - a.window + 1, 0, a.kv_len)) : 0;
  return {lo, std::max(lo, hi)};
}
// The keys some row of the tile [i0, i0 + rows) sees: rows see later keys as they
// go, so the first row's start and the last row's end.
inline KeyRange tile_keys(const AttentionArgs& a, int i0, int rows) {
  return {visible_keys(a, i0).lo, visible_keys(a, i0 + rows - 1).hi};
}

struct TilePtrs {
  const float* q;
  const float* k;  // from the tile's first key on
  const float* v;
  float* out;
};

TilePtrs tile_ptrs(const AttentionArgs& a, int b, int h, int i0, int key0) {
  int g = h / (a.n_head / a.n_kv_head);
  TilePtrs p;
  p.q = a.q + b * a.q_batch_stride + i0 * a.q_row_stride + static_cast<int64_t>(h) * a.head_dim;
  p.k = a.k + b * a.kv_batch_stride + key0 * a.kv_row_stride + static_cast<int64_t>(g) * a.head_dim;
  p.v = a.v + b * a.kv_batch_stride + key0 * a.kv_row_stride + static_cast<int64_t>(g) * a.head_dim;
  p.out = a.out + b * a.out_batch_stride + i0 * a.out_row_stride + static_cast<int64_t>(h) * a.head_dim;
  return p;
}

// S[rows, cols] = scale * Q_tile · K[key0 : key0 + cols]^T
void scores(const AttentionArgs& a, const TilePtrs& p, int rows, int cols, float* S) {
  f32_gemm(false, true, rows, cols, a.head_dim, a.scale, p.q, a.q_row_stride, p.k, a.kv_row_stride, 0.0f, S, cols);
}

// Soft-capping of a row's visible scores; `tanh_out` (may be null) keeps the tanh
// for the backward pass.
void softcap_row(float* s, int n, float cap, float* tanh_out) {
  const float inv = 1.0f / cap;
  for (int j = 0; j < n; ++j) {
    const float t = std::tanh(s[j] * inv);
    if (tanh_out) tanh_out[j] = t;
    s[j] = cap * t;
  }
}

void forward_tile(const AttentionArgs& a, int b, int h, int i0, float* S) {
  const int rows = std::min(kTile, a.q_len - i0);
  const KeyRange tile = tile_keys(a, i0, rows);
  const int cols = tile.size();
  TilePtrs p = tile_ptrs(a, b, h, i0, tile.lo);
  if (cols > 0) scores(a, p, rows, cols, S);
  for (int r = 0; r < rows; ++r) {
    float* row = S + static_cast<int64_t>(r) * cols;
    const KeyRange vis = visible_keys(a, i0 + r);
    const int lo = vis.lo - tile.lo, n = vis.size();
    float lse = -INFINITY;
    if (n > 0) {
      if (a.softcap > 0.0f) softcap_row(row + lo, n, a.softcap, nullptr);
      lse = softmax_inplace(row + lo, n);
    }
    std::memset(row, 0, sizeof(float) * lo);
    std::memset(row + lo + n, 0, sizeof(float) * (cols - lo - n));
    if (a.lse) a.lse[(static_cast<int64_t>(b) * a.n_head + h) * a.q_len + i0 + r] = lse;
  }
  if (cols > 0) {
    f32_gemm(false, false, rows, a.head_dim, cols, 1.0f, S, cols, p.v, a.kv_row_stride, 0.0f, p.out,
             a.out_row_stride);
  } else {
    for (int r = 0; r < rows; ++r) std::memset(p.out + r * a.out_row_stride, 0, sizeof(float) * a.head_dim);
  }
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
  const bool capped = a.softcap > 0.0f;
  int64_t tasks = static_cast<int64_t>(a.batch) * a.n_kv_head;
  std::vector<std::vector<float>> scratch(num_threads());
  bool simd = use_avx2();
  parallel_chunks(0, tasks, [&](int64_t lo, int64_t hi, int thread) {
    std::vector<float>& buf = scratch[thread];
    const size_t tile_floats = static_cast<size_t>(kTile) * a.kv_len;
    buf.resize((capped ? 3 : 2) * tile_floats);
    float* P = buf.data();
    float* dP = P + tile_floats;
    float* tanh_s = capped ? dP + tile_floats : nullptr;  // tanh(s / cap) of the capped scores
    for (int64_t task = lo; task < hi; ++task) {
      int b = static_cast<int>(task / a.n_kv_head);
      int kvh = static_cast<int>(task % a.n_kv_head);
      float* dk_all = g.dk + b * a.kv_batch_stride + static_cast<int64_t>(kvh) * D;
      float* dv_all = g.dv + b * a.kv_batch_stride + static_cast<int64_t>(kvh) * D;
      for (int t = 0; t < a.kv_len && !g.accumulate; ++t) {
        std::memset(dk_all + t * a.kv_row_stride, 0, sizeof(float) * D);
        std::memset(dv_all + t * a.kv_row_stride, 0, sizeof(float) * D);
      }
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int i0 = 0; i0 < T; i0 += kTile) {
          const int rows = std::min(kTile, T - i0);
          const KeyRange tile = tile_keys(a, i0, rows);
          const int cols = tile.size();
          float* dq = g.dq + b * a.q_batch_stride + i0 * a.q_row_stride + static_cast<int64_t>(h) * D;
          if (cols == 0) {  // no row of the tile sees a key of this block
            for (int r = 0; r < rows && !g.accumulate; ++r) std::memset(dq + r * a.q_row_stride, 0, sizeof(float) * D);
            continue;
          }
          TilePtrs p = tile_ptrs(a, b, h, i0, tile.lo);
          float* dk = dk_all + tile.lo * a.kv_row_stride;
          float* dv = dv_all + tile.lo * a.kv_row_stride;
          const float* dout = g.dout + b * a.out_batch_stride + i0 * a.out_row_stride + static_cast<int64_t>(h) * D;
          const float* lse = a.lse + (static_cast<int64_t>(b) * a.n_head + h) * T + i0;
          const float* delta = g.delta ? g.delta + (static_cast<int64_t>(b) * a.n_head + h) * T + i0 : nullptr;
          // P = exp(softcap(scale * Q K^T) - lse), masked.
          scores(a, p, rows, cols, P);
          for (int r = 0; r < rows; ++r) {
            float* row = P + static_cast<int64_t>(r) * cols;
            const KeyRange vis = visible_keys(a, i0 + r);
            const int lo = vis.lo - tile.lo, n = vis.size();
            if (capped) softcap_row(row + lo, n, a.softcap, tanh_s + static_cast<int64_t>(r) * cols + lo);
            if (n > 0) (simd ? avx2::softmax_from_lse : scalar::softmax_from_lse)(row + lo, lse[r], 1.0f, n);
            std::memset(row, 0, sizeof(float) * lo);
            std::memset(row + lo + n, 0, sizeof(float) * (cols - lo - n));
          }
          // dP = dO · V^T
          f32_gemm(false, true, rows, cols, D, 1.0f, dout, a.out_row_stride, p.v, a.kv_row_stride, 0.0f, dP, cols);
          // dS = P * (dP - sum_j P_j dP_j), written over dP. The row sum is taken
          // from P and dP themselves (not as dO . O, which is equal in exact
          // arithmetic), so a row with one visible key gets exactly zero. Through
          // the soft-cap: d(cap tanh(s / cap))/ds = 1 - tanh^2.
          for (int r = 0; r < rows; ++r) {
            float* prow = P + static_cast<int64_t>(r) * cols;
            float* drow = dP + static_cast<int64_t>(r) * cols;
            const KeyRange vis = visible_keys(a, i0 + r);
            const int lo = vis.lo - tile.lo, n = vis.size();
            float di = delta ? delta[r] : dot(prow + lo, drow + lo, n);
            for (int j = lo; j < lo + n; ++j) drow[j] = prow[j] * (drow[j] - di);
            if (capped) {
              const float* t = tanh_s + static_cast<int64_t>(r) * cols;
              for (int j = lo; j < lo + n; ++j) drow[j] *= 1.0f - t[j] * t[j];
            }
            std::memset(drow, 0, sizeof(float) * lo);
            std::memset(drow + lo + n, 0, sizeof(float) * (cols - lo - n));
          }
          // dV[keys] += P^T · dO
          f32_gemm(true, false, cols, D, rows, 1.0f, P, cols, dout, a.out_row_stride, 1.0f, dv, a.kv_row_stride);
          // dQ_tile = scale * dS · K[keys]
          f32_gemm(false, false, rows, D, cols, a.scale, dP, cols, p.k, a.kv_row_stride, g.accumulate ? 1.0f : 0.0f, dq,
                   a.q_row_stride);
          // dK[keys] += scale * dS^T · Q_tile
          f32_gemm(true, false, cols, D, rows, a.scale, dP, cols, p.q, a.q_row_stride, 1.0f, dk, a.kv_row_stride);
        }
      }
    }
  });
}

}  // namespace distllm::kernels
