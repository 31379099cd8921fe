// Blocking, packing, threading and the scalar reference micro-kernel of sgemm
// and gemm_bf16 (see gemm.h). The ISA micro-kernels live in gemm_avx2.cpp,
// gemm_avx512.cpp and gemm_bf16_avx512.cpp; a Config names a kernel, its packing and
// how many k one packed word holds, and the driver below serves them all.
#include "distllm/kernels/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace detail::scalar {
constexpr int kMR = 4, kNR = 8;
void gemm_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, float beta) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < kMR; ++i)
      for (int j = 0; j < kNR; ++j) acc[i][j] += a[i] * b[j];
    a += kMR;
    b += kNR;
  }
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < kNR; ++j) {
      float v = alpha * acc[i][j];
      c[i * ldc + j] = beta == 0.0f ? v : v + beta * c[i * ldc + j];
    }
}
}  // namespace detail::scalar

namespace {

using PackA = void (*)(float*, const float*, int64_t, bool, int64_t, int64_t, int64_t, int64_t);
using PackB = PackA;

struct Config {
  GemmBlocking blk;
  detail::GemmMicroKernel kernel;
  PackA pack_a = nullptr;  // null: the generic packing below
  PackB pack_b = nullptr;
  int k_per_word = 1;  // 2 for bf16 pairs: a panel of kc k's is ceil(kc / 2) words deep
};

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  int v = std::atoi(s);
  return v > 0 ? v : fallback;
}

// KC, MC, NC chosen by measurement (docs/benchmarks.md, "GEMM"); DISTLLM_GEMM_KC/MC/NC
// override them for tuning runs (MC and NC are rounded up to MR and NR multiples).
Config make_config(GemmBlocking b, detail::GemmMicroKernel k) {
  b.kc = env_int("DISTLLM_GEMM_KC", b.kc);
  b.mc = (env_int("DISTLLM_GEMM_MC", b.mc) + b.mr - 1) / b.mr * b.mr;
  b.nc = (env_int("DISTLLM_GEMM_NC", b.nc) + b.nr - 1) / b.nr * b.nr;
  return {b, k};
}

const Config& config() {
  static const Config avx512 = [] {
    Config c = make_config({detail::avx512::kMR, detail::avx512::kNR, 512, 12 * 28, 32 * 16, "avx512"},
                           detail::avx512::gemm_kernel);
    c.pack_a = detail::avx512::pack_a;
    c.pack_b = detail::avx512::pack_b;
    return c;
  }();
  static const Config avx2 =
      make_config({detail::avx2::kMR, detail::avx2::kNR, 256, 6 * 40, 16 * 32, "avx2"}, detail::avx2::gemm_kernel);
  static const Config scalar = make_config(
      {detail::scalar::kMR, detail::scalar::kNR, 256, 4 * 16, 8 * 64, "scalar"}, detail::scalar::gemm_kernel);
  if (use_avx512()) return avx512;
  if (use_avx2()) return avx2;
  return scalar;
}

// The f32 KC in k values, so half its bytes per panel (a bf16 word holds two k):
// measured alike with twice the KC.
const Config& bf16_config() {
  static const Config bf16 = [] {
    Config c = make_config(
        {detail::avx512_bf16::kMR, detail::avx512_bf16::kNR, 512, 12 * 28, 32 * 16, "avx512_bf16"},
        detail::avx512_bf16::gemm_kernel);
    c.pack_a = detail::avx512_bf16::pack_a;
    c.pack_b = detail::avx512_bf16::pack_b;
    c.k_per_word = 2;
    return c;
  }();
  return bf16;
}

// Per-thread packing buffers, grown on demand and kept for the thread's lifetime.
struct PackBuffer {
  float* data = nullptr;
  size_t capacity = 0;  // floats
  ~PackBuffer() { std::free(data); }
  float* get(size_t n) {
    if (n > capacity) {
      std::free(data);
      size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      data = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!data) throw std::bad_alloc();
      capacity = n;
    }
    return data;
  }
};

// op(A)[i0 : i0+mc, k0 : k0+kc] into ceil(mc/MR) panels, each kc x MR (k-major),
// rows past mc zero.
void pack_a(float* dst, const float* A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
            int MR) {
  for (int64_t p = 0; p < mc; p += MR) {
    int rows = static_cast<int>(std::min<int64_t>(MR, mc - p));
    float* d = dst + p * kc;
    if (trans) {  // op(A)(i, k) = A[k * lda + i]: MR contiguous values per k
      const float* s = A + k0 * lda + i0 + p;
      for (int64_t k = 0; k < kc; ++k, s += lda, d += MR) {
        int r = 0;
        for (; r < rows; ++r) d[r] = s[r];
        for (; r < MR; ++r) d[r] = 0.0f;
      }
    } else {  // op(A)(i, k) = A[i * lda + k]: one stream per row
      const float* s = A + (i0 + p) * lda + k0;
      for (int r = 0; r < MR; ++r) {
        if (r < rows) {
          const float* sr = s + r * lda;
          for (int64_t k = 0; k < kc; ++k) d[k * MR + r] = sr[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) d[k * MR + r] = 0.0f;
        }
      }
    }
  }
}

// op(B)[k0 : k0+kc, j0 : j0+nc] into ceil(nc/NR) panels, each kc x NR (k-major),
// columns past nc zero.
void pack_b(float* dst, const float* B, int64_t ldb, bool trans, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
            int NR) {
  for (int64_t p = 0; p < nc; p += NR) {
    int cols = static_cast<int>(std::min<int64_t>(NR, nc - p));
    float* d = dst + p * kc;
    if (!trans) {  // op(B)(k, j) = B[k * ldb + j]: NR contiguous values per k
      const float* s = B + k0 * ldb + j0 + p;
      if (cols == NR) {
        for (int64_t k = 0; k < kc; ++k, s += ldb, d += NR) std::memcpy(d, s, sizeof(float) * NR);
      } else {
        for (int64_t k = 0; k < kc; ++k, s += ldb, d += NR) {
          int c = 0;
          for (; c < cols; ++c) d[c] = s[c];
          for (; c < NR; ++c) d[c] = 0.0f;
        }
      }
    } else {  // op(B)(k, j) = B[j * ldb + k]: one stream per column
      const float* s = B + (j0 + p) * ldb + k0;
      // Blocks of 8 k's: 8 consecutive reads from each of the NR rows, written as 8
      // full NR-wide rows of the panel.
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) {
        for (int c = 0; c < NR; ++c) {
          if (c < cols) {
            const float* sc = s + c * ldb + k;
            for (int u = 0; u < 8; ++u) d[(k + u) * NR + c] = sc[u];
          } else {
            for (int u = 0; u < 8; ++u) d[(k + u) * NR + c] = 0.0f;
          }
        }
      }
      for (; k < kc; ++k)
        for (int c = 0; c < NR; ++c) d[k * NR + c] = c < cols ? s[c * ldb + k] : 0.0f;
    }
  }
}

// A packed for one KC slice is kept for every NC block of C instead of being packed
// again per block: up to this many bytes of it at a time (4032 rows, 12 MC blocks,
// at KC = 512). At 2048^3 repacking A for each of the four NC blocks took 6% of the
// product.
constexpr int64_t kPackedABytes = 8 << 20;

// Threads whose tiles cover the same rows of C (one row of the thread grid) pack
// those rows of A once between them, into the first member's buffer: each packs
// its `part` of the rows, and the group meets at its barrier before packing (all
// are done with the previous slice) and after (all parts are there). Packing is
// bound by how fast a core reads A from L3 (~10 GB/s on the Xeon VM): with each
// thread packing all of A, A's packing was 5% of a 2-thread 2048^3 product's
// samples in perf, and 2.3% shared (docs/benchmarks.md, "GEMM").
struct SharedA {
  TeamBarrier* barrier;
  float** buffer;  // the first member's, set before its first arrival
  int part, parts;
};

// One thread's share: C[m0:m1, n0:n1], all of K. `share` null: A packed alone.
void gemm_tile(const Config& cfg, bool ta, bool tb, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K,
               float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const SharedA* share) {
  const GemmBlocking b = cfg.blk;
  const int MR = b.mr, NR = b.nr;
  thread_local PackBuffer abuf, bbuf;
  const int kpw = cfg.k_per_word;
  const int64_t kc_max = (std::min<int64_t>(b.kc, K) + kpw - 1) / kpw;  // words
  // Rows of A packed at once: the tile's, up to kPackedABytes, in whole MC blocks.
  const int64_t rows_cap = std::max<int64_t>(b.mc, kPackedABytes / (kc_max * 4) / b.mc * b.mc);
  const int64_t rows_max = std::min<int64_t>(rows_cap, (m1 - m0 + MR - 1) / MR * MR);
  float* ap = nullptr;
  if (!share || share->part == 0) ap = abuf.get(static_cast<size_t>(rows_max) * kc_max);
  if (share && share->part == 0) *share->buffer = ap;
  float* bp = bbuf.get(static_cast<size_t>(b.nc) * kc_max);
  alignas(64) float edge[16 * 64];  // MR x NR scratch for partial tiles
  for (int64_t pc = 0; pc < K; pc += b.kc) {
    const int64_t kc = std::min<int64_t>(b.kc, K - pc);
    const int64_t kd = (kc + kpw - 1) / kpw;  // the panels' depth in words
    const float beta_k = pc == 0 ? beta : 1.0f;
    for (int64_t ma = m0; ma < m1; ma += rows_max) {
      const int64_t rows = std::min<int64_t>(rows_max, m1 - ma);
      // Rows [lo, hi) of this chunk, whole panels (the last one zero-padded).
      auto pack_rows = [&](int64_t lo, int64_t hi) {
        if (lo >= hi) return;
        if (cfg.pack_a)
          cfg.pack_a(ap + lo * kd, A, lda, ta, ma + lo, hi - lo, pc, kc);
        else
          pack_a(ap + lo * kd, A, lda, ta, ma + lo, hi - lo, pc, kc, MR);
      };
      if (share) {
        share->barrier->arrive_and_wait();
        ap = *share->buffer;
        const int64_t panels = (rows + MR - 1) / MR;
        pack_rows(std::min(rows, panels * share->part / share->parts * MR),
                  std::min(rows, panels * (share->part + 1) / share->parts * MR));
        share->barrier->arrive_and_wait();
      } else {
        pack_rows(0, rows);
      }
      for (int64_t jc = n0; jc < n1; jc += b.nc) {
        const int64_t nc = std::min<int64_t>(b.nc, n1 - jc);
        if (cfg.pack_b)
          cfg.pack_b(bp, B, ldb, tb, pc, kc, jc, nc);
        else
          pack_b(bp, B, ldb, tb, pc, kc, jc, nc, NR);
        for (int64_t ic = ma; ic < ma + rows; ic += b.mc) {
          const int64_t mc = std::min<int64_t>(b.mc, ma + rows - ic);
          // ir outside, jr inside: the A micro-panel (MR x KC) stays in L1 across a
          // row of C tiles while the B micro-panels stream from the KC x NC slice in
          // L2. The other order (B's micro-panel in L1) needs KC x NR in L1 next to
          // the streaming A: it capped KC at 256, and each KC slice reads and writes
          // all of C. This order with KC = 512 ran 2048^3 at 160 GFLOP/s on one
          // thread against 140.
          auto micro = [&](int64_t jr, int64_t ir) __attribute__((always_inline)) {
            const int nr = static_cast<int>(std::min<int64_t>(NR, nc - jr));
            const float* bpanel = bp + jr * kd;
            const int mr = static_cast<int>(std::min<int64_t>(MR, mc - ir));
            float* c = C + (ic + ir) * ldc + jc + jr;
            const float* apanel = ap + (ic - ma + ir) * kd;
            // The kernel touches its C tile only at the end: start fetching it now
            // (rows a power of two apart would otherwise miss one by one).
            for (int i = 0; i < mr; ++i) {
              __builtin_prefetch(c + i * ldc, 1);
              __builtin_prefetch(c + i * ldc + nr - 1, 1);
            }
            if (mr == MR && nr == NR) {
              cfg.kernel(kd, apanel, bpanel, c, ldc, alpha, beta_k);
            } else {
              cfg.kernel(kd, apanel, bpanel, edge, NR, alpha, 0.0f);
              for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nr; ++j) {
                  float v = edge[i * NR + j];
                  c[i * ldc + j] = beta_k == 0.0f ? v : v + beta_k * c[i * ldc + j];
                }
            }
          };
          for (int64_t ir = 0; ir < mc; ir += MR)
            for (int64_t jr = 0; jr < nc; jr += NR) micro(jr, ir);
        }
      }
    }
  }
}

// sgemm's and gemm_bf16's body: the thread grid, then each thread's blocked loops.
void gemm_driver(const Config& cfg, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.0f) {  // C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const int MR = cfg.blk.mr, NR = cfg.blk.nr;
  const bool ta = trans_a == Trans::kT, tb = trans_b == Trans::kT;
  const int64_t mu = (M + MR - 1) / MR, nu = (N + NR - 1) / NR;  // units of micro-tiles

  // 2-D grid tm x tn of per-thread tiles. The cost model is the padded tile's FMAs
  // plus its packing: each thread packs its B columns, and 1/tn of its A rows (the
  // row's tn threads share them, SharedA), both once per KC slice.
  int threads = in_parallel_region() ? 1 : num_threads();
  if (static_cast<double>(M) * N * K < 64.0 * 64 * 64) threads = 1;
  threads = static_cast<int>(std::min<int64_t>(threads, mu * nu));
  int best_tm = 1;
  double best_cost = -1;
  for (int tm = 1; tm <= threads; ++tm) {
    if (threads % tm) continue;
    int tn = threads / tm;
    if (tm > mu || tn > nu) continue;
    double mt = static_cast<double>((mu + tm - 1) / tm) * MR, nt = static_cast<double>((nu + tn - 1) / tn) * NR;
    double cost = mt * nt + 8.0 * (mt / tn + nt);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best_tm = tm;
  }
  const int tm = best_tm, tn = threads / tm;
  if (threads == 1) {
    gemm_tile(cfg, ta, tb, 0, M, 0, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
    return;
  }
  std::deque<TeamBarrier> row_barriers;  // one per row of the grid
  for (int r = 0; r < tm; ++r) row_barriers.emplace_back(tn);
  std::vector<float*> row_buffers(static_cast<size_t>(tm), nullptr);
  auto tile = [&](int64_t t, bool shared) {
    const int64_t r = t / tn, c = t % tn;
    const int64_t m0 = std::min(M, mu * r / tm * MR), m1 = std::min(M, mu * (r + 1) / tm * MR);
    const int64_t n0 = std::min(N, nu * c / tn * NR), n1 = std::min(N, nu * (c + 1) / tn * NR);
    const SharedA share{&row_barriers[static_cast<size_t>(r)], &row_buffers[static_cast<size_t>(r)],
                        static_cast<int>(c), tn};
    // A sharing member joins its row's packing even with no columns of its own.
    if (m0 < m1 && (n0 < n1 || (shared && tn > 1)))
      gemm_tile(cfg, ta, tb, m0, m1, n0, n1, K, alpha, A, lda, B, ldb, beta, C, ldc,
                shared && tn > 1 ? &share : nullptr);
  };
  parallel_team(threads, [&](int rank, int size) {
    if (size == threads) {
      tile(rank, true);
    } else {  // a smaller team than asked: members must not wait for absent ones
      for (int64_t t = rank; t < threads; t += size) tile(t, false);
    }
  });
}

}  // namespace

GemmBlocking gemm_blocking() { return config().blk; }
GemmBlocking gemm_bf16_blocking() { return bf16_config().blk; }

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_driver(config(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* gemm_bf16_unavailable_reason() {
  if (!cpu_features().avx512_bf16) return "this CPU lacks AVX512_BF16";
  if (!use_avx512()) return "the active ISA level is below avx512 (DISTLLM_ISA caps it)";
  return "";
}

bool gemm_bf16_available() { return *gemm_bf16_unavailable_reason() == '\0'; }

void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  DL_CHECK(gemm_bf16_available(), "bf16 compute is not available: %s", gemm_bf16_unavailable_reason());
  gemm_driver(bf16_config(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace distllm::kernels

