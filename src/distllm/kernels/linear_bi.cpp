#include "distllm/kernels/linear_bi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

PackedLinear::PackedLinear(const float* weight, int N, int K, DType dtype)
    : PackedLinear(weight, N, K, K, 1, dtype) {}

PackedLinear PackedLinear::from_transposed(const float* weight_kn, int N, int K, DType dtype) {
  return PackedLinear(weight_kn, N, K, 1, N, dtype);
}

template <typename Elem>
void PackedLinear::pack_unit(int u, Elem elem) {
  const int rows = std::min(unit_rows(), N_ - u * unit_rows());
  auto w = [&](int j, int k) { return j < rows && k < K_ ? elem(j, k) : 0.0f; };
  if (dtype_ == DType::kI8) {
    // Symmetric per (row, 32-wide k-block): scale = max |w| / 127, q = round(w / scale),
    // stored at [block][k / 4][row][k % 4].
    int8_t* dst = reinterpret_cast<int8_t*>(data_.data()) + u * strip_bytes();
    float* scale = scales_.data() + static_cast<int64_t>(u) * k_blocks() * kStripRows;
    for (int b = 0; b < k_blocks(); ++b)
      for (int j = 0; j < kStripRows; ++j) {
        float amax = 0.0f;
        for (int k = b * kQuantBlock; k < (b + 1) * kQuantBlock; ++k) amax = std::max(amax, std::fabs(w(j, k)));
        const float s = amax / 127.0f;
        scale[b * kStripRows + j] = s;
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int kk = 0; kk < kQuantBlock; ++kk) {
          const float q = std::clamp(std::nearbyint(w(j, b * kQuantBlock + kk) * inv), -127.0f, 127.0f);
          dst[b * kStripBlockBytes + (kk / 4) * kStripRows * 4 + j * 4 + kk % 4] = static_cast<int8_t>(q);
        }
      }
    return;
  }
  uint8_t* dst = data_.data() + u * group_bytes();
  for (int c = 0; c < k_chunks_; ++c)
    for (int j = 0; j < kRows; ++j)
      for (int l = 0; l < kLanes; ++l) {
        const float v = w(j, c * kLanes + l);
        const int64_t i = (c * kRows + j) * kLanes + l;
        if (dtype_ == DType::kBF16) reinterpret_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
        else reinterpret_cast<float*>(dst)[i] = v;
      }
}

PackedLinear::PackedLinear(int N, int K, DType dtype)
    : N_(N), K_(K), k_chunks_((K + kLanes - 1) / kLanes), dtype_(dtype), elem_bytes_(static_cast<int>(dtype_size(dtype))) {
  DL_CHECK(supports(dtype), "packed linear weights can be f32, bf16 or i8, not %s", dtype_short_name(dtype));
  // Every element is written once by pack_unit, padding included: no zero-fill
  // pass over a buffer that can be hundreds of MB (the LM head) at start-up.
  if (dtype == DType::kI8) {
    data_.resize_uninitialized(static_cast<size_t>(strips() * strip_bytes()));
    scales_.resize_uninitialized(static_cast<size_t>(strips()) * k_blocks() * kStripRows);
  } else {
    data_.resize_uninitialized(static_cast<size_t>((N + kRows - 1) / kRows * group_bytes()));
  }
}

PackedLinear::PackedLinear(const float* weight, int N, int K, int64_t n_stride, int64_t k_stride, DType dtype)
    : PackedLinear(N, K, dtype) {
  parallel_for(0, units(), [&](int64_t u) {
    const int64_t n0 = u * unit_rows();
    pack_unit(static_cast<int>(u), [&](int j, int k) { return weight[(n0 + j) * n_stride + k * k_stride]; });
  });
}

PackedLinear PackedLinear::from_rows(int N, int K, const RowReader& read_rows, DType dtype) {
  PackedLinear p(N, K, dtype);
  const int unit_rows = p.unit_rows();
  parallel_chunks(0, p.units(), [&](int64_t u0, int64_t u1, int) {
    std::vector<float> rows(static_cast<size_t>(unit_rows) * K);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t n0 = u * unit_rows;
      read_rows(n0, static_cast<int>(std::min<int64_t>(unit_rows, N - n0)), rows.data());
      p.pack_unit(static_cast<int>(u), [&](int j, int k) { return rows[static_cast<size_t>(j) * K + k]; });
    }
  });
  return p;
}

float PackedLinear::at(int n, int k) const {
  if (dtype_ == DType::kI8) {
    const int s = n / kStripRows, j = n % kStripRows, b = k / kQuantBlock, kk = k % kQuantBlock;
    const int8_t q = strip_data(s)[b * kStripBlockBytes + (kk / 4) * kStripRows * 4 + j * 4 + kk % 4];
    return static_cast<float>(q) * strip_scales(s)[b * kStripRows + j];
  }
  const int g = n / kRows, j = n % kRows, c = k / kLanes;
  const int64_t i = (static_cast<int64_t>(c) * kRows + j) * kLanes + k % kLanes;
  const void* p = group_data(g);
  if (dtype_ == DType::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

namespace scalar {

int linear_bi_tile_max_rows() { return 3; }
int linear_bi_tile_rows(int64_t /*batch*/) { return 3; }
int linear_bi_bf16_tile_max_rows() { return 3; }
int linear_bi_q8_tile_max_rows() { return 3; }

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                    int mr, int g0, int g1, int64_t /*prefetch_bytes*/, int /*prefetch_phase*/,
                    int /*prefetch_period*/) {
  const int K = w.K();
  std::vector<float> row(static_cast<size_t>(K));
  for (int g = g0; g < g1; ++g) {
    for (int j = 0; j < PackedLinear::kRows; ++j) {
      int n = g * PackedLinear::kRows + j;
      if (n >= w.N()) break;
      for (int k = 0; k < K; ++k) row[static_cast<size_t>(k)] = w.at(n, k);
      for (int r = 0; r < mr; ++r) {
        float s = 0.0f;
        for (int k = 0; k < K; ++k) s += x[r * ldx + k] * row[static_cast<size_t>(k)];
        out[r * ldo + n] = s + (bias ? bias[n] : 0.0f);
      }
    }
  }
}

void linear_bi_q8_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w,
                       const float* bias, int mr, int s0, int s1) {
  // The integers and float operations of the SIMD tiles, in their order: each
  // block's exact integer dot product, then one FMA by both scales.
  constexpr int S = PackedLinear::kStripRows, Q = PackedLinear::kQuantBlock;
  for (int s = s0; s < s1; ++s) {
    const int8_t* p = w.strip_data(s);
    const float* sw = w.strip_scales(s);
    for (int j = 0; j < S && s * S + j < w.N(); ++j) {
      const int n = s * S + j;
      for (int r = 0; r < mr; ++r) {
        const int8_t* xq = x.row(row0 + r);
        float acc = 0.0f;
        for (int b = 0; b < w.k_blocks(); ++b) {
          int32_t dot = 0;
          for (int kk = 0; kk < Q; ++kk)
            dot += static_cast<int32_t>(xq[b * Q + kk]) *
                   p[b * PackedLinear::kStripBlockBytes + (kk / 4) * S * 4 + j * 4 + kk % 4];
          acc = std::fma(static_cast<float>(dot), sw[b * S + j] * x.row_scales(row0 + r)[b], acc);
        }
        out[r * ldo + n] = acc + (bias ? bias[n] : 0.0f);
      }
    }
  }
}

void linear_bi_bf16_tile(float* out, int64_t ldo, const Bf16Rows& x, int64_t row0, const PackedLinear& w,
                         const float* bias, int mr, int g0, int g1) {
  // The SIMD tiles' sums in their order: lane (row j, pair i) of chunk c adds the
  // odd element's product, then the even one's, into the accumulator of c's parity;
  // the parities are added lane by lane, then each row's four lanes pairwise.
  constexpr int L = PackedLinear::kLanes, R = PackedLinear::kRows;
  for (int g = g0; g < g1; ++g) {
    const uint16_t* p = static_cast<const uint16_t*>(w.group_data(g));
    for (int j = 0; j < R && g * R + j < w.N(); ++j) {
      const int n = g * R + j;
      for (int r = 0; r < mr; ++r) {
        const uint16_t* xr = x.row(row0 + r);
        float acc[2][4] = {};
        for (int c = 0; c < w.k_chunks(); ++c)
          for (int i = 0; i < 4; ++i) {
            const uint16_t* wp = p + (c * R + j) * L + 2 * i;
            const uint16_t* xp = xr + c * L + 2 * i;
            float& a = acc[c & 1][i];
            a = std::fma(bf16_to_f32(xp[1]), bf16_to_f32(wp[1]), a);
            a = std::fma(bf16_to_f32(xp[0]), bf16_to_f32(wp[0]), a);
          }
        float v[4];
        for (int i = 0; i < 4; ++i) v[i] = acc[0][i] + acc[1][i];
        out[r * ldo + n] = ((v[0] + v[1]) + (v[2] + v[3])) + (bias ? bias[n] : 0.0f);
      }
    }
  }
}

}  // namespace scalar

namespace {

// int8 batches of at least this many rows run on AMX tiles where there are some:
// the strip rearrangement costs about as much as a VNNI pass over one row.
constexpr int64_t kAmxMinRows = 4;

using Bf16Tile = void (*)(float*, int64_t, const Bf16Rows&, int64_t, const PackedLinear&, const float*, int, int,
                          int);

// The tile linear_bi runs for bf16 weights here, and how many rows it takes per call.
struct Bf16Path {
  Bf16Tile tile;
  int max_rows;
};
Bf16Path bf16_path() {
  if (use_avx512() && cpu_features().avx512_bf16)
    return {avx512::linear_bi_bf16_tile, avx512::linear_bi_bf16_tile_max_rows()};
  if (use_avx2()) return {avx2::linear_bi_bf16_tile, avx2::linear_bi_bf16_tile_max_rows()};
  return {scalar::linear_bi_bf16_tile, scalar::linear_bi_bf16_tile_max_rows()};
}
Bf16Tile bf16_tile() { return bf16_path().tile; }

using Q8Tile = void (*)(float*, int64_t, const Q8Rows&, int64_t, const PackedLinear&, const float*, int, int, int);

struct Q8Path {
  Q8Tile tile;
  int max_rows;
};
Q8Path q8_path() {
  if (use_avx512() && cpu_features().avx512_vnni) return {avx512::linear_bi_q8_tile, avx512::linear_bi_q8_tile_max_rows()};
  if (use_avx2()) return {avx2::linear_bi_q8_tile, avx2::linear_bi_q8_tile_max_rows()};
  return {scalar::linear_bi_q8_tile, scalar::linear_bi_q8_tile_max_rows()};
}
Q8Tile q8_tile() { return q8_path().tile; }

}  // namespace

const char* linear_bi_q8_path() {
  const Q8Tile t = q8_tile();
  if (t == avx512::linear_bi_q8_tile) return use_amx() ? "amx (4+ rows), avx512_vnni" : "avx512_vnni";
  return t == avx2::linear_bi_q8_tile ? "avx2" : "scalar";
}

const char* linear_bi_bf16_path() {
  const Bf16Tile t = bf16_tile();
  return t == avx512::linear_bi_bf16_tile ? "avx512_bf16" : t == avx2::linear_bi_bf16_tile ? "avx2" : "scalar";
}

namespace {

// int8: the quantized rows against the strips. Batches of 4+ rows go to AMX where
// there is one; otherwise contiguous runs of strips per thread, each swept by tiles
// of a few rows (decode: one sweep, so the weights stream from memory once).
void linear_bi_q8(float* out, int64_t ldo, const Q8Rows& xq, const PackedLinear& w, const float* bias, int64_t M) {
  const int strips = w.strips();
  // Rows in panels whose quantized x stays in L2 while the strips stream past.
  const int64_t panel_bytes = 512 * 1024;
  if (M >= kAmxMinRows && use_amx()) {
    const int64_t panel = std::max<int64_t>(16, panel_bytes / xq.ld / 16 * 16);
    for (int64_t m0 = 0; m0 < M; m0 += panel) {
      const int64_t rows = std::min(panel, M - m0);
      parallel_for(0, strips, [&](int64_t s) {
        amx::linear_bi_q8_rows(out + m0 * ldo, ldo, xq, m0, rows, w, bias, static_cast<int>(s),
                               static_cast<int>(s) + 1);
      });
    }
    return;
  }
  const Q8Path path = q8_path();
  const int64_t panel = std::max<int64_t>(path.max_rows, panel_bytes / xq.ld / path.max_rows * path.max_rows);
  // Decode streams long runs (two strips per task); batches sweep a block of about
  // 32 KB per tile of rows, so it is re-read from L1/L2.
  const int strips_per_task = M <= 3 ? 2 : static_cast<int>(std::max<int64_t>(1, (32 * 1024) / w.strip_bytes()));
  const int64_t tasks = (strips + strips_per_task - 1) / strips_per_task;
  for (int64_t m0 = 0; m0 < M; m0 += panel) {
    const int64_t rows = std::min(panel, M - m0);
    parallel_for(0, tasks, [&](int64_t t) {
      const int s0 = static_cast<int>(t) * strips_per_task, s1 = std::min(strips, s0 + strips_per_task);
      for (int64_t r = 0; r < rows; r += path.max_rows) {
        const int mr = static_cast<int>(std::min<int64_t>(path.max_rows, rows - r));
        path.tile(out + (m0 + r) * ldo, ldo, xq, m0 + r, w, bias, mr, s0, s1);
      }
    });
  }
}

}  // namespace

void linear_bi(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
               int64_t M) {
  if (M <= 0 || w.N() <= 0) return;
  auto f32_tile = use_avx512() ? avx512::linear_bi_tile : use_avx2() ? avx2::linear_bi_tile : scalar::linear_bi_tile;
  const int f32_rows = use_avx512() ? avx512::linear_bi_tile_rows(M)
                       : use_avx2() ? avx2::linear_bi_tile_rows(M)
                                    : scalar::linear_bi_tile_rows(M);
  // int8 and bf16: x quantized / rounded once per call (per row, so still
  // batch-invariant), into the caller's buffers (a thread_local named inside the
  // tasks would be each worker's own).
  thread_local Q8Rows q8_scratch;
  thread_local Bf16Rows bf16_scratch;
  Q8Rows& xq = q8_scratch;
  Bf16Rows& xb = bf16_scratch;
  const DType dt = w.dtype();
  if (dt == DType::kI8) {
    quantize_q8_rows(x, ldx, M, w.K(), xq);
    linear_bi_q8(out, ldo, xq, w, bias, M);
    return;
  }
  if (dt == DType::kBF16) round_bf16_rows(x, ldx, M, w.K(), xb);
  const Bf16Tile bf16_kernel = dt == DType::kBF16 ? bf16_tile() : nullptr;
  const int groups = (w.N() + PackedLinear::kRows - 1) / PackedLinear::kRows;
  auto tile = [&](float* o, const float* xr, int mr, int g0, int g1, int64_t ahead, int phase, int period) {
    if (bf16_kernel) {
      bf16_kernel(o, ldo, xb, (xr - x) / ldx, w, bias, mr, g0, g1);
    } else {
      f32_tile(o, ldo, xr, ldx, w, bias, mr, g0, g1, ahead, phase, period);
    }
  };
  // Rows are processed in panels small enough that a panel of x stays in L2 while
  // the weight streams past it once; decode (M <= panel) reads W exactly once.
  // Rows per tile call: 3, or up to 8 on AVX-512 (each weight load feeds more FMAs,
  // cutting its L2 traffic in prefill).
  const int tile_rows = dt == DType::kF32 ? f32_rows : bf16_path().max_rows;
  const int64_t bytes_per_row = static_cast<int64_t>(w.K()) * 4;
  const int64_t panel =
      std::max<int64_t>(tile_rows, std::min<int64_t>(96, (256 * 1024) / bytes_per_row / tile_rows * tile_rows));
  // A task's weight block is swept once per tile of rows of a panel: keep it near L1
  // size so batches re-read it from cache (32 KB measured as good as any size from
  // 16 to 96 KB at batch 16, and better than 1 MB). Decode keeps long runs.
  constexpr int64_t kTaskBytes = 32 * 1024;
  const int kGroupsPerTask = M <= 3 ? 8 : static_cast<int>(std::max<int64_t>(2, kTaskBytes / w.group_bytes()));
  const int64_t tasks = (groups + kGroupsPerTask - 1) / kGroupsPerTask;
  const int64_t block_bytes = kGroupsPerTask * w.group_bytes();
  for (int64_t m0 = 0; m0 < M; m0 += panel) {
    const int64_t rows = std::min(panel, M - m0);
    // Static contiguous halves: each thread streams one long run of the packed
    // weight (measured faster than dynamic scheduling for decode).
    parallel_for(0, tasks, [&](int64_t t) {
      int g0 = static_cast<int>(t * kGroupsPerTask);
      int g1 = std::min(groups, g0 + kGroupsPerTask);
      const int sweeps = static_cast<int>((rows + tile_rows - 1) / tile_rows);
      for (int64_t r = 0; r < rows; r += tile_rows) {
        int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - r));
        const int sweep = static_cast<int>(r / tile_rows);
        // A batch of one sweep (decode, and up to 8 rows on AVX-512) streams the
        // weights from memory once: it asks for them kStreamPrefetchBytes ahead
        // into L2 (batch 8 on Llama 134M: 24.7 -> 21 ms per step; batch 1 14.8 ->
        // 14.1). In batches of several sweeps the later ones compute from cache and
        // pull the next block into L2, each a different share of its chunks (a
        // burst from one sweep overflows the miss buffers).
        int64_t ahead = 0;
        int phase = 0, period = 1;
        if (sweeps == 1) ahead = kStreamPrefetchBytes;
        else if (sweep > 0) ahead = block_bytes, phase = sweep - 1, period = sweeps - 1;
        tile(out + (m0 + r) * ldo, x + (m0 + r) * ldx, mr, g0, g1, ahead, phase, period);
      }
    });
  }
}

}  // namespace distllm::kernels
