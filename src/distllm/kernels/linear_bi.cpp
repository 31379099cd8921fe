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
void PackedLinear::pack_group(int g, Elem elem) {
  const int rows = std::min(kRows, N_ - g * kRows);
  auto w = [&](int j, int k) { return j < rows && k < K_ ? elem(j, k) : 0.0f; };
  uint8_t* dst = data_.data() + g * group_bytes();
  if (dtype_ == DType::kI8) {
    // Symmetric per (row, 32-wide k-block): scale = max |w| / 127, q = round(w / scale).
    float* scale = scales_.data() + static_cast<int64_t>(g) * k_blocks() * kRows;
    for (int b = 0; b < k_blocks(); ++b)
      for (int j = 0; j < kRows; ++j) {
        float amax = 0.0f;
        for (int k = b * kQuantBlock; k < (b + 1) * kQuantBlock; ++k) amax = std::max(amax, std::fabs(w(j, k)));
        const float s = amax / 127.0f;
        scale[b * kRows + j] = s;
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int c = b * 4; c < std::min(k_chunks_, b * 4 + 4); ++c)
          for (int l = 0; l < kLanes; ++l) {
            const float q = std::nearbyint(w(j, c * kLanes + l) * inv);
            reinterpret_cast<int8_t*>(dst)[(c * kRows + j) * kLanes + l] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
          }
      }
    return;
  }
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
  const int groups = (N + kRows - 1) / kRows;
  // Every element is written once by pack_group, padding included: no zero-fill
  // pass over a buffer that can be hundreds of MB (the LM head) at start-up.
  data_.resize_uninitialized(static_cast<size_t>(groups * group_bytes()));
  if (dtype == DType::kI8) scales_.resize_uninitialized(static_cast<size_t>(groups) * k_blocks() * kRows);
}

PackedLinear::PackedLinear(const float* weight, int N, int K, int64_t n_stride, int64_t k_stride, DType dtype)
    : PackedLinear(N, K, dtype) {
  parallel_for(0, (N + kRows - 1) / kRows, [&](int64_t g) {
    const int64_t n0 = g * kRows;
    pack_group(static_cast<int>(g), [&](int j, int k) { return weight[(n0 + j) * n_stride + k * k_stride]; });
  });
}

PackedLinear PackedLinear::from_rows(int N, int K, const RowReader& read_rows, DType dtype) {
  PackedLinear p(N, K, dtype);
  parallel_chunks(0, (N + kRows - 1) / kRows, [&](int64_t g0, int64_t g1, int) {
    std::vector<float> rows(static_cast<size_t>(kRows) * K);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n0 = g * kRows;
      read_rows(n0, static_cast<int>(std::min<int64_t>(kRows, N - n0)), rows.data());
      p.pack_group(static_cast<int>(g), [&](int j, int k) { return rows[static_cast<size_t>(j) * K + k]; });
    }
  });
  return p;
}

float PackedLinear::at(int n, int k) const {
  const int g = n / kRows, j = n % kRows, c = k / kLanes;
  const int64_t i = (static_cast<int64_t>(c) * kRows + j) * kLanes + k % kLanes;
  const void* p = group_data(g);
  switch (dtype_) {
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kI8: return static_cast<float>(static_cast<const int8_t*>(p)[i]) * group_scales(g)[(c / 4) * kRows + j];
    default: return static_cast<const float*>(p)[i];
  }
}

namespace scalar {

int linear_bi_tile_max_rows() { return 3; }
int linear_bi_bf16_tile_max_rows() { return 3; }
int linear_bi_q8_tile_max_rows() { return 3; }

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                    int mr, int g0, int g1, int /*prefetch_groups*/, int /*prefetch_phase*/,
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
                       const float* bias, int mr, int g0, int g1) {
  // The integers and float operations of the SIMD tiles, in their order: each
  // block's exact integer dot product, then one FMA by both scales.
  constexpr int L = PackedLinear::kLanes;
  for (int g = g0; g < g1; ++g) {
    const int8_t* p = static_cast<const int8_t*>(w.group_data(g));
    const float* sw = w.group_scales(g);
    for (int j = 0; j < PackedLinear::kRows && g * PackedLinear::kRows + j < w.N(); ++j) {
      const int n = g * PackedLinear::kRows + j;
      for (int r = 0; r < mr; ++r) {
        const int8_t* xq = x.row(row0 + r);
        float acc = 0.0f;
        for (int c0 = 0, b = 0; c0 < w.k_chunks(); c0 += 4, ++b) {
          int32_t dot = 0;
          for (int c = c0; c < std::min(c0 + 4, w.k_chunks()); ++c)
            for (int l = 0; l < L; ++l)
              dot += static_cast<int32_t>(xq[c * L + l]) * p[(c * PackedLinear::kRows + j) * L + l];
          const float s = sw[b * PackedLinear::kRows + j] * x.row_scales(row0 + r)[b];
          acc = std::fma(static_cast<float>(dot), s, acc);
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

void linear_bi(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
               int64_t M) {
  if (M <= 0 || w.N() <= 0) return;
  auto f32_tile = use_avx512() ? avx512::linear_bi_tile : use_avx2() ? avx2::linear_bi_tile : scalar::linear_bi_tile;
  const int f32_rows = use_avx512() ? avx512::linear_bi_tile_max_rows()
                       : use_avx2() ? avx2::linear_bi_tile_max_rows()
                                    : scalar::linear_bi_tile_max_rows();
  // int8 and bf16: x quantized / rounded once per call (per row, so still
  // batch-invariant), into the caller's buffers (a thread_local named inside the
  // tasks would be each worker's own).
  thread_local Q8Rows q8_scratch;
  thread_local Bf16Rows bf16_scratch;
  Q8Rows& xq = q8_scratch;
  Bf16Rows& xb = bf16_scratch;
  const DType dt = w.dtype();
  if (dt == DType::kI8) quantize_q8_rows(x, ldx, M, w.K(), xq);
  if (dt == DType::kBF16) round_bf16_rows(x, ldx, M, w.K(), xb);
  const Q8Tile q8_kernel = dt == DType::kI8 ? q8_tile() : nullptr;
  const Bf16Tile bf16_kernel = dt == DType::kBF16 ? bf16_tile() : nullptr;
  const int groups = (w.N() + PackedLinear::kRows - 1) / PackedLinear::kRows;
  if (dt == DType::kI8 && M >= kAmxMinRows && use_amx()) {
    // Strips of 16 outputs split statically between the threads; rows in panels
    // whose quantized x stays in L2 while each strip is rearranged once per panel.
    const int strips = (groups + amx::kStripGroups - 1) / amx::kStripGroups;
    const int64_t panel = std::max<int64_t>(16, (512 * 1024) / xq.ld / 16 * 16);
    for (int64_t m0 = 0; m0 < M; m0 += panel) {
      const int64_t rows = std::min(panel, M - m0);
      parallel_for(0, strips, [&](int64_t s) {
        const int g0 = static_cast<int>(s) * amx::kStripGroups;
        amx::linear_bi_q8_rows(out + m0 * ldo, ldo, xq, m0, rows, w, bias, g0,
                               std::min(groups, g0 + amx::kStripGroups));
      });
    }
    return;
  }
  auto tile = [&](float* o, const float* xr, int mr, int g0, int g1, int ahead, int phase, int period) {
    if (q8_kernel) {
      q8_kernel(o, ldo, xq, (xr - x) / ldx, w, bias, mr, g0, g1);
    } else if (bf16_kernel) {
      bf16_kernel(o, ldo, xb, (xr - x) / ldx, w, bias, mr, g0, g1);
    } else {
      f32_tile(o, ldo, xr, ldx, w, bias, mr, g0, g1, ahead, phase, period);
    }
  };
  // Rows are processed in panels small enough that a panel of x stays in L2 while
  // the weight streams past it once; decode (M <= panel) reads W exactly once.
  // Rows per tile call: 3, or 6 on AVX-512 (each weight load feeds twice the FMAs,
  // halving its L2 traffic in prefill).
  const int tile_rows = dt == DType::kF32 ? f32_rows : dt == DType::kBF16 ? bf16_path().max_rows : q8_path().max_rows;
  const int64_t bytes_per_row = static_cast<int64_t>(w.K()) * 4;
  const int64_t panel =
      std::max<int64_t>(tile_rows, std::min<int64_t>(96, (256 * 1024) / bytes_per_row / tile_rows * tile_rows));
  // A task's weight block is swept once per 3-row tile of a panel: keep it near L1
  // size so batches re-read it from cache (32 KB measured as good as any size from
  // 16 to 96 KB at batch 16, and better than 1 MB). Decode keeps long runs.
  constexpr int64_t kTaskBytes = 32 * 1024;
  const int kGroupsPerTask = M <= 3 ? 8 : static_cast<int>(std::max<int64_t>(2, kTaskBytes / w.group_bytes()));
  const int64_t tasks = (groups + kGroupsPerTask - 1) / kGroupsPerTask;
  for (int64_t m0 = 0; m0 < M; m0 += panel) {
    const int64_t rows = std::min(panel, M - m0);
    // Static contiguous halves: each thread streams one long run of the packed
    // weight (measured faster than dynamic scheduling for decode).
    parallel_for(0, tasks, [&](int64_t t) {
      int g0 = static_cast<int>(t * kGroupsPerTask);
      int g1 = std::min(groups, g0 + kGroupsPerTask);
      for (int64_t r = 0; r < rows; r += tile_rows) {
        int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - r));
        // The first sweep of a block waits on memory; the later ones compute from
        // cache, so they pull the next block into L2 behind their FMAs, each a
        // different share of its chunks (a burst from one sweep overflows the miss
        // buffers): +4% on a batch-16 gpt2-124M step, -12% time in mlp_out.
        const int sweep = static_cast<int>(r / tile_rows), sweeps = static_cast<int>((rows + tile_rows - 1) / tile_rows);
        if (sweep == 0)
          tile(out + (m0 + r) * ldo, x + (m0 + r) * ldx, mr, g0, g1, 0, 0, 1);
        else
          tile(out + (m0 + r) * ldo, x + (m0 + r) * ldx, mr, g0, g1, kGroupsPerTask, sweep - 1, sweeps - 1);
      }
    });
  }
}

}  // namespace distllm::kernels
