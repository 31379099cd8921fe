// Kernels against straightforward double-precision references written here. The
// end-to-end model is additionally checked against PyTorch (tests/model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/kernels/activation.h"
#include "distllm/kernels/adamw.h"
#include "distllm/kernels/attention.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/matmul.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/rope.h"
#include "kernels/test_util.h"

namespace distllm::kernels {
namespace {

using distllm::testing::random_vector;
using distllm::testing::rel_error;

// Runs each test at 1 and 2 threads: results must be right whatever the split.
class KernelRef : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = num_threads();
    set_num_threads(GetParam());
  }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

std::vector<float> naive_matmul(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int M,
                                int K, int N, WeightLayout layout) {
  std::vector<float> out(M * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = bias ? bias[n] : 0.0;
      for (int k = 0; k < K; ++k)
        s += static_cast<double>(x[m * K + k]) * (layout == WeightLayout::kInOut ? w[k * N + n] : w[n * K + k]);
      out[m * N + n] = static_cast<float>(s);
    }
  return out;
}

TEST_P(KernelRef, MatmulForwardAndBackward) {
  for (auto layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    for (int M : {1, 3, 5, 8, 33}) {
      int K = 37, N = 29;
      SCOPED_TRACE(::testing::Message() << "M=" << M << " layout=" << static_cast<int>(layout));
      auto x = random_vector(M * K, 1), w = random_vector(K * N, 2), b = random_vector(N, 3);
      std::vector<float> out(M * N);
      matmul_forward(out.data(), x.data(), w.data(), b.data(), M, K, N, layout);
      EXPECT_LT(rel_error(out, naive_matmul(x, w, b.data(), M, K, N, layout)), 1e-6);
      // accumulate adds x·W without bias
      auto acc = out;
      matmul_forward(acc.data(), x.data(), w.data(), b.data(), M, K, N, layout, 0, 0, true);
      auto xw = naive_matmul(x, w, nullptr, M, K, N, layout);
      for (int i = 0; i < M * N; ++i) EXPECT_NEAR(acc[i], out[i] + xw[i], 1e-4);

      auto dout = random_vector(M * N, 4);
      std::vector<float> dx(M * K), dw(K * N, 1.0f), db(N, 2.0f);
      matmul_backward_input(dx.data(), dout.data(), w.data(), M, K, N, layout);
      matmul_backward_weight(dw.data(), db.data(), dout.data(), x.data(), M, K, N, layout);
      for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k) {
          double s = 0;
          for (int n = 0; n < N; ++n)
            s += static_cast<double>(dout[m * N + n]) * (layout == WeightLayout::kInOut ? w[k * N + n] : w[n * K + k]);
          EXPECT_NEAR(dx[m * K + k], s, 1e-4);
        }
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n) {
          double s = 1.0;
          for (int m = 0; m < M; ++m) s += static_cast<double>(x[m * K + k]) * dout[m * N + n];
          EXPECT_NEAR(layout == WeightLayout::kInOut ? dw[k * N + n] : dw[n * K + k], s, 1e-4);
        }
      for (int n = 0; n < N; ++n) {
        double s = 2.0;
        for (int m = 0; m < M; ++m) s += dout[m * N + n];
        EXPECT_NEAR(db[n], s, 1e-4);
      }
    }
  }
}

TEST_P(KernelRef, MatmulStrided) {
  // Write into columns [5, 5+N) of a wider output, read from a wider input.
  int M = 6, K = 10, N = 7, ldi = 16, ldo = 20;
  auto xw = random_vector(M * ldi, 5), w = random_vector(N * K, 6);
  std::vector<float> x(M * K);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) x[m * K + k] = xw[m * ldi + k];
  std::vector<float> out(M * ldo, 9.0f);
  matmul_forward(out.data() + 5, xw.data(), w.data(), nullptr, M, K, N, WeightLayout::kOutIn, ldi, ldo);
  auto ref = naive_matmul(x, w, nullptr, M, K, N, WeightLayout::kOutIn);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) EXPECT_NEAR(out[m * ldo + 5 + n], ref[m * N + n], 1e-5);
    EXPECT_EQ(out[m * ldo + 4], 9.0f);
    EXPECT_EQ(out[m * ldo + 5 + N], 9.0f);
  }
}

// Naive causal GQA attention in double, forward and backward; the query at i sits
// `offset` positions after key i (Tk - Tq by default), optionally over a sliding
// window and with soft-capped scores.
struct NaiveAttention {
  int B, H, KV, D, Tq, Tk;
  std::vector<double> out, dq, dk, dv;
  int window = 0;
  double softcap = 0;
  int offset = -1;
  void run(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
           const std::vector<float>& dout, double scale) {
    out.assign(B * Tq * H * D, 0);
    dq.assign(q.size(), 0);
    dk.assign(k.size(), 0);
    dv.assign(v.size(), 0);
    int group = H / KV;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        int g = h / group;
        for (int i = 0; i < Tq; ++i) {
          const int pos = (offset >= 0 ? offset : Tk - Tq) + i;
          const int vis = std::clamp(pos + 1, 0, Tk), lo = window > 0 ? std::clamp(pos - window + 1, 0, vis) : 0;
          auto Q = [&](int d) { return q[((b * Tq + i) * H + h) * D + d]; };
          auto Kk = [&](int j, int d) { return k[((b * Tk + j) * KV + g) * D + d]; };
          auto V = [&](int j, int d) { return v[((b * Tk + j) * KV + g) * D + d]; };
          std::vector<double> s(vis), p(vis), t(vis);
          double mx = -1e300;
          for (int j = lo; j < vis; ++j) {
            double acc = 0;
            for (int d = 0; d < D; ++d) acc += Q(d) * Kk(j, d);
            s[j] = acc * scale;
            if (softcap > 0) s[j] = softcap * (t[j] = std::tanh(s[j] / softcap));
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (int j = lo; j < vis; ++j) sum += (p[j] = std::exp(s[j] - mx));
          for (int j = lo; j < vis; ++j) p[j] /= sum;
          double* o = &out[((b * Tq + i) * H + h) * D];
          for (int j = lo; j < vis; ++j)
            for (int d = 0; d < D; ++d) o[d] += p[j] * V(j, d);
          if (dout.empty()) continue;
          const float* dO = &dout[((b * Tq + i) * H + h) * D];
          std::vector<double> dp(vis);
          double di = 0;
          for (int d = 0; d < D; ++d) di += dO[d] * o[d];
          for (int j = lo; j < vis; ++j) {
            for (int d = 0; d < D; ++d) {
              dp[j] += dO[d] * V(j, d);
              dv[((b * Tk + j) * KV + g) * D + d] += p[j] * dO[d];
            }
          }
          for (int j = lo; j < vis; ++j) {
            double ds = p[j] * (dp[j] - di) * scale * (softcap > 0 ? 1 - t[j] * t[j] : 1.0);
            for (int d = 0; d < D; ++d) {
              dq[((b * Tq + i) * H + h) * D + d] += ds * Kk(j, d);
              dk[((b * Tk + j) * KV + g) * D + d] += ds * Q(d);
            }
          }
        }
      }
  }
};

// Relative error, measured against max(||b||, 1e-3) so exact-zero gradients (T=1:
// one visible key, the softmax is constant) compare in absolute terms.
double rel_error_d(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-6));
}

TEST_P(KernelRef, AttentionMatchesNaive) {
  struct Case { int B, H, KV, D, T; };
  for (Case c : {Case{2, 4, 4, 8, 5}, Case{1, 3, 1, 5, 70}, Case{2, 6, 2, 16, 130}, Case{1, 4, 1, 4, 1},
                 Case{3, 2, 2, 3, 65}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " H=" << c.H << " KV=" << c.KV << " D=" << c.D << " T=" << c.T);
    auto q = random_vector(c.B * c.T * c.H * c.D, 20);
    auto k = random_vector(c.B * c.T * c.KV * c.D, 21);
    auto v = random_vector(c.B * c.T * c.KV * c.D, 22);
    auto dout = random_vector(c.B * c.T * c.H * c.D, 23);
    float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    std::vector<float> out(q.size()), lse(c.B * c.H * c.T);
    AttentionArgs a;
    a.batch = c.B;
    a.n_head = c.H;
    a.n_kv_head = c.KV;
    a.head_dim = c.D;
    a.q_len = a.kv_len = c.T;
    a.scale = scale;
    a.q = q.data();
    a.q_row_stride = c.H * c.D;
    a.q_batch_stride = static_cast<int64_t>(c.T) * c.H * c.D;
    a.k = k.data();
    a.v = v.data();
    a.kv_row_stride = c.KV * c.D;
    a.kv_batch_stride = static_cast<int64_t>(c.T) * c.KV * c.D;
    a.out = out.data();
    a.out_row_stride = a.q_row_stride;
    a.out_batch_stride = a.q_batch_stride;
    a.lse = lse.data();
    attention_forward(a);
    NaiveAttention ref{c.B, c.H, c.KV, c.D, c.T, c.T, {}, {}, {}, {}};
    ref.run(q, k, v, dout, scale);
    EXPECT_LT(rel_error_d(out, ref.out), 1e-5);

    std::vector<float> dq(q.size()), dk(k.size(), 7.0f), dv(v.size(), 7.0f);
    attention_backward(a, AttentionGrads{dq.data(), dk.data(), dv.data(), dout.data()});
    EXPECT_LT(rel_error_d(dq, ref.dq), 1e-4);
    EXPECT_LT(rel_error_d(dk, ref.dk), 1e-4);
    EXPECT_LT(rel_error_d(dv, ref.dv), 1e-4);
  }
}

// Sliding windows (Mistral, Gemma's local layers) and soft-capped scores (Gemma 2),
// alone and together, forward and backward, against the naive attention: windows
// of one key, shorter than a tile, across tiles and longer than the sequence.
TEST_P(KernelRef, AttentionWindowAndSoftcapMatchNaive) {
  struct Case { int B, H, KV, D, T, window; float softcap; };
  for (Case c : {Case{2, 4, 2, 8, 70, 1, 0}, Case{1, 3, 1, 5, 130, 5, 0}, Case{2, 6, 2, 16, 150, 64, 0},
                 Case{1, 2, 2, 8, 40, 100, 0}, Case{2, 4, 4, 8, 65, 0, 2.0f}, Case{1, 4, 2, 16, 140, 33, 1.5f}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " window=" << c.window << " softcap=" << c.softcap);
    // Large scores, so the soft-cap bends them (tanh well away from linear).
    auto q = random_vector(c.B * c.T * c.H * c.D, 40), k = random_vector(c.B * c.T * c.KV * c.D, 41);
    for (float& x : q) x *= 4.0f;
    auto v = random_vector(c.B * c.T * c.KV * c.D, 42), dout = random_vector(c.B * c.T * c.H * c.D, 43);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    std::vector<float> out(q.size()), lse(c.B * c.H * c.T);
    AttentionArgs a;
    a.batch = c.B, a.n_head = c.H, a.n_kv_head = c.KV, a.head_dim = c.D;
    a.q_len = a.kv_len = c.T;
    a.scale = scale, a.window = c.window, a.softcap = c.softcap;
    a.q = q.data(), a.q_row_stride = c.H * c.D, a.q_batch_stride = static_cast<int64_t>(c.T) * c.H * c.D;
    a.k = k.data(), a.v = v.data(), a.kv_row_stride = c.KV * c.D;
    a.kv_batch_stride = static_cast<int64_t>(c.T) * c.KV * c.D;
    a.out = out.data(), a.out_row_stride = a.q_row_stride, a.out_batch_stride = a.q_batch_stride;
    a.lse = lse.data();
    attention_forward(a);
    NaiveAttention ref{c.B, c.H, c.KV, c.D, c.T, c.T, {}, {}, {}, {}};
    ref.window = c.window, ref.softcap = c.softcap;
    ref.run(q, k, v, dout, scale);
    EXPECT_LT(rel_error_d(out, ref.out), 1e-5);
    std::vector<float> dq(q.size()), dk(k.size(), 7.0f), dv(v.size(), 7.0f);
    attention_backward(a, AttentionGrads{dq.data(), dk.data(), dv.data(), dout.data()});
    if (c.window == 1) {
      // One key per query: the softmax is constant, dq and dk are zero up to the
      // rounding of exp(s - lse) next to 1 (measured below 1e-6).
      for (float x : dq) EXPECT_LT(std::fabs(x), 1e-5f);
      for (float x : dk) EXPECT_LT(std::fabs(x), 1e-5f);
    } else {
      EXPECT_LT(rel_error_d(dq, ref.dq), 1e-4);
      EXPECT_LT(rel_error_d(dk, ref.dk), 1e-4);
    }
    EXPECT_LT(rel_error_d(dv, ref.dv), 1e-4);
    // The window is honoured: moving a key the window excludes changes nothing
    // (rows from `window` on), and moves the rows that see it (row 1).
    if (c.window > 1 && c.window < c.T) {
      std::vector<float> k2 = k, out2(q.size());
      for (int d = 0; d < c.KV * c.D; ++d) k2[d] += 5.0f;  // key 0 of sequence 0
      a.k = k2.data(), a.out = out2.data();
      attention_forward(a);
      const int64_t row = static_cast<int64_t>(c.H) * c.D;
      EXPECT_EQ(std::memcmp(out.data() + c.window * row, out2.data() + c.window * row,
                            sizeof(float) * (c.T - c.window) * row), 0);
      EXPECT_NE(std::memcmp(out.data() + row, out2.data() + row, sizeof(float) * row), 0);
    }
  }
}

// A block of keys that lies before a query chunk (ring attention's view: the
// queries sit `query_offset` positions after the block's first key): rows whose
// window ends before the block see nothing (out 0, lse -inf, no gradient), the
// others their part of the window.
TEST_P(KernelRef, AttentionWindowOverAnEarlierBlockOfKeys) {
  const int H = 2, KV = 1, D = 8, C = 20, window = 30, offset = 25;  // row r sees keys [r - 4, 19]
  auto q = random_vector(C * H * D, 50), k = random_vector(C * KV * D, 51), v = random_vector(C * KV * D, 52);
  auto dout = random_vector(C * H * D, 53);
  std::vector<float> out(q.size()), lse(H * C);
  AttentionArgs a;
  a.n_head = H, a.n_kv_head = KV, a.head_dim = D, a.q_len = a.kv_len = C, a.query_offset = offset;
  a.scale = 0.35f, a.window = window;
  a.q = q.data(), a.q_row_stride = H * D, a.k = k.data(), a.v = v.data(), a.kv_row_stride = KV * D;
  a.out = out.data(), a.out_row_stride = H * D, a.lse = lse.data();
  attention_forward(a);
  NaiveAttention ref{1, H, KV, D, C, C, {}, {}, {}, {}};
  ref.window = window, ref.offset = offset;
  ref.run(q, k, v, dout, 0.35);
  EXPECT_LT(rel_error_d(out, ref.out), 1e-5);
  // Rows 24.. see keys from 20 on: none of this block.
  for (int r = 0; r < C; ++r)
    for (int h = 0; h < H; ++h) {
      if (r >= 24) {
        EXPECT_EQ(lse[h * C + r], -INFINITY) << r;
        for (int d = 0; d < D; ++d) EXPECT_EQ(out[(r * H + h) * D + d], 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(lse[h * C + r])) << r;
      }
    }
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  attention_backward(a, AttentionGrads{dq.data(), dk.data(), dv.data(), dout.data()});
  EXPECT_LT(rel_error_d(dq, ref.dq), 1e-4);
  EXPECT_LT(rel_error_d(dk, ref.dk), 1e-4);
  EXPECT_LT(rel_error_d(dv, ref.dv), 1e-4);
}

TEST_P(KernelRef, AttentionQueriesAtEndOfCache) {
  // 3 new queries over 10 cached positions (a prefill chunk with a prefix).
  int H = 4, KV = 2, D = 8, Tq = 3, Tk = 10;
  auto q = random_vector(Tq * H * D, 30), k = random_vector(Tk * KV * D, 31), v = random_vector(Tk * KV * D, 32);
  std::vector<float> out(q.size());
  AttentionArgs a;
  a.n_head = H;
  a.n_kv_head = KV;
  a.head_dim = D;
  a.q_len = Tq;
  a.kv_len = Tk;
  a.scale = 0.3f;
  a.q = q.data();
  a.q_row_stride = H * D;
  a.k = k.data();
  a.v = v.data();
  a.kv_row_stride = KV * D;
  a.out = out.data();
  a.out_row_stride = H * D;
  attention_forward(a);
  NaiveAttention ref{1, H, KV, D, Tq, Tk, {}, {}, {}, {}};
  ref.run(q, k, v, {}, 0.3);
  EXPECT_LT(rel_error_d(out, ref.out), 1e-5);
}

TEST_P(KernelRef, CrossEntropyWithIgnoreIndex) {
  int N = 9, V = 1001;
  auto logits = random_vector(N * V, 40, 3.0f);
  std::vector<int32_t> targets = {0, 5, kIgnoreIndex, 1000, 17, kIgnoreIndex, 3, 999, 500};
  std::vector<float> losses(N), grads = logits;
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
  std::vector<float> losses2(N);
  cross_entropy_forward_backward(losses2.data(), grads.data(), targets.data(), N, V, 0.25f);
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(losses[n], losses2[n]);
    if (targets[n] == kIgnoreIndex) {
      EXPECT_EQ(losses[n], 0.0f);
      for (int j = 0; j < V; ++j) EXPECT_EQ(grads[n * V + j], 0.0f);
      continue;
    }
    double mx = -1e300, sum = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(logits[n * V + j]));
    for (int j = 0; j < V; ++j) sum += std::exp(logits[n * V + j] - mx);
    double lse = mx + std::log(sum);
    EXPECT_NEAR(losses[n], lse - logits[n * V + targets[n]], 1e-5);
    double gsum = 0;
    for (int j = 0; j < V; ++j) {
      double p = std::exp(logits[n * V + j] - lse);
      double expect = 0.25 * (p - (j == targets[n] ? 1.0 : 0.0));
      EXPECT_NEAR(grads[n * V + j], expect, 1e-7);
      gsum += grads[n * V + j];
    }
    EXPECT_NEAR(gsum, 0.0, 1e-6);
  }
}

TEST_P(KernelRef, LayerNormBackwardMatchesFiniteDifferences) {
  // d/dx of sum(layernorm(x) * dout) by central differences in double on the
  // float kernel's forward, for a small row.
  int N = 3, C = 11;
  auto x = random_vector(N * C, 50), w = random_vector(C, 51), b = random_vector(C, 52), dout = random_vector(N * C, 53);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  auto objective = [&](const std::vector<float>& xx, const std::vector<float>& ww) {
    std::vector<float> o(N * C);
    layernorm_forward(o.data(), nullptr, nullptr, xx.data(), ww.data(), b.data(), N, C, 1e-5f);
    double s = 0;
    for (int i = 0; i < N * C; ++i) s += static_cast<double>(o[i]) * dout[i];
    return s;
  };
  const float h = 1e-2f;
  for (int i = 0; i < N * C; ++i) {
    auto xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR(dx[i], (objective(xp, w) - objective(xm, w)) / (2 * h), 2e-3);
  }
  for (int c = 0; c < C; ++c) {
    auto wp = w, wm = w;
    wp[c] += h;
    wm[c] -= h;
    EXPECT_NEAR(dw[c], (objective(x, wp) - objective(x, wm)) / (2 * h), 2e-3);
    double sb = 0;
    for (int n = 0; n < N; ++n) sb += dout[n * C + c];
    EXPECT_NEAR(db[c], sb, 1e-5);
  }
}

TEST_P(KernelRef, RmsNormBackwardMatchesFiniteDifferences) {
  int N = 2, C = 13;
  auto x = random_vector(N * C, 60), w = random_vector(C, 61), dout = random_vector(N * C, 62);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  auto objective = [&](const std::vector<float>& xx, const std::vector<float>& ww) {
    std::vector<float> o(N * C);
    rmsnorm_forward(o.data(), nullptr, xx.data(), ww.data(), N, C, 1e-6f);
    double s = 0;
    for (int i = 0; i < N * C; ++i) s += static_cast<double>(o[i]) * dout[i];
    return s;
  };
  const float h = 1e-2f;
  for (int i = 0; i < N * C; ++i) {
    auto xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR(dx[i], (objective(xp, w) - objective(xm, w)) / (2 * h), 2e-3);
  }
  for (int c = 0; c < C; ++c) {
    auto wp = w, wm = w;
    wp[c] += h;
    wm[c] -= h;
    EXPECT_NEAR(dw[c], (objective(x, wp) - objective(x, wm)) / (2 * h), 2e-3);
  }
}

TEST_P(KernelRef, ActivationDerivatives) {
  auto x = random_vector(101, 70, 3.0f);
  std::vector<float> ones(101, 1.0f), d(101), y(101);
  gelu_backward(d.data(), x.data(), ones.data(), 101);
  gelu_forward(y.data(), x.data(), 101);
  for (int i = 0; i < 101; ++i) {
    double xd = x[i];
    double ref = 0.5 * xd * (1 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
    EXPECT_NEAR(y[i], ref, 1e-5);
    auto f = [](double t) { return 0.5 * t * (1 + std::tanh(0.7978845608028654 * (t + 0.044715 * t * t * t))); };
    EXPECT_NEAR(d[i], (f(xd + 1e-5) - f(xd - 1e-5)) / 2e-5, 1e-4);
  }
  // swiglu: rows of [gate | up]
  int I = 7;
  auto gu = random_vector(3 * 2 * I, 71, 2.0f), dout = random_vector(3 * I, 72);
  std::vector<float> out(3 * I), dgu(3 * 2 * I);
  swiglu_forward(out.data(), gu.data(), 3, I);
  swiglu_backward(dgu.data(), gu.data(), dout.data(), 3, I);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < I; ++i) {
      double g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
      double sig = 1 / (1 + std::exp(-g));
      EXPECT_NEAR(out[r * I + i], g * sig * u, 1e-5);
      EXPECT_NEAR(dgu[r * 2 * I + I + i], dout[r * I + i] * g * sig, 1e-5);
      EXPECT_NEAR(dgu[r * 2 * I + i], dout[r * I + i] * u * sig * (1 + g * (1 - sig)), 1e-5);
    }
}

TEST_P(KernelRef, RopeRoundTripAndConvention) {
  int D = 8, H = 2;
  RopeTable table(D, 64, 10000.0);
  auto x = random_vector(5 * H * D, 80);
  auto y = x;
  std::vector<int32_t> pos = {0, 1, 2, 33, 63};
  rope_apply(y.data(), 5, H * D, H, pos.data(), table, false);
  // position 0 is the identity
  for (int i = 0; i < H * D; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
  // explicit rotate_half formula at position 33, head 1, pair i=1
  {
    int r = 3, h = 1, i = 1;
    double inv = 1.0 / std::pow(10000.0, 2.0 * i / D);
    double ang = 33 * inv;
    double x1 = x[r * H * D + h * D + i], x2 = x[r * H * D + h * D + i + D / 2];
    EXPECT_NEAR(y[r * H * D + h * D + i], x1 * std::cos(ang) - x2 * std::sin(ang), 1e-5);
    EXPECT_NEAR(y[r * H * D + h * D + i + D / 2], x2 * std::cos(ang) + x1 * std::sin(ang), 1e-5);
  }
  rope_apply(y.data(), 5, H * D, H, pos.data(), table, true);
  EXPECT_LT(rel_error(y, x), 1e-6);
  std::vector<int32_t> bad = {64};
  EXPECT_THROW(rope_apply(y.data(), 1, H * D, H, bad.data(), table, false), Error);
}

TEST_P(KernelRef, EmbeddingScatterAdd) {
  int V = 10, C = 70, P = 4;
  auto wte = random_vector(V * C, 90), wpe = random_vector(P * C, 91);
  std::vector<int32_t> tok = {3, 3, 9, 0, 3}, pos = {0, 1, 2, 3, 0};
  std::vector<float> out(5 * C);
  embedding_forward(out.data(), tok.data(), pos.data(), wte.data(), wpe.data(), 5, C);
  for (int n = 0; n < 5; ++n)
    for (int c = 0; c < C; ++c) EXPECT_FLOAT_EQ(out[n * C + c], wte[tok[n] * C + c] + wpe[pos[n] * C + c]);
  auto dout = random_vector(5 * C, 92);
  std::vector<float> dwte(V * C), dwpe(P * C);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), pos.data(), 5, C);
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(dwte[3 * C + c], dout[0 * C + c] + dout[1 * C + c] + dout[4 * C + c], 1e-6);
    EXPECT_EQ(dwte[5 * C + c], 0.0f);
    EXPECT_NEAR(dwpe[0 * C + c], dout[0 * C + c] + dout[4 * C + c], 1e-6);
  }
}

TEST_P(KernelRef, AdamWMatchesFormulaAndClipping) {
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.1f, -0.3f, 0.0f}, m = {0, 0, 0}, v = {0, 0, 0};
  AdamWStep s;
  s.lr = 0.01f;
  s.weight_decay = 0.1f;
  s.step = 1;
  auto p0 = p;
  adamw_update(p.data(), g.data(), m.data(), v.data(), 3, s);
  for (int i = 0; i < 3; ++i) {
    double mi = 0.1 * g[i], vi = 0.001 * g[i] * g[i];
    double mhat = mi / 0.1, denom = std::sqrt(vi) / std::sqrt(0.001) + 1e-8;
    double expect = p0[i] * (1 - 0.01 * 0.1) - 0.01 * mhat / denom;
    EXPECT_NEAR(p[i], expect, 1e-6);
  }
  std::vector<float> a = {3.0f, 0.0f}, b = {4.0f};
  const float* bufs[] = {a.data(), b.data()};
  int64_t sizes[] = {2, 1};
  double norm = global_norm(bufs, sizes, 2);
  EXPECT_NEAR(norm, 5.0, 1e-12);
  float* mbufs[] = {a.data(), b.data()};
  float coef = clip_by_global_norm(mbufs, sizes, 2, norm, 1.0);
  EXPECT_NEAR(coef, 1.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(a[0], 0.6f, 1e-6);
  EXPECT_NEAR(b[0], 0.8f, 1e-6);
  EXPECT_EQ(clip_by_global_norm(mbufs, sizes, 2, 0.5, 1.0), 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Threads, KernelRef, ::testing::Values(1, 2));

}  // namespace
}  // namespace distllm::kernels
