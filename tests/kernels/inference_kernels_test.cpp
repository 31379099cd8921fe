// Batch-invariant inference kernels: correctness against naive references, AVX2 vs
// scalar, and bit-exact invariance of a row's result to the batch around it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "distllm/base/cpu.h"
#include "distllm/base/parallel.h"
#include "distllm/kernels/kv_layout.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/paged_attention.h"
#include "kernels/test_util.h"

namespace distllm::kernels {
namespace {

using distllm::testing::random_vector;
using distllm::testing::rel_error;

class LinearBiDtype : public ::testing::TestWithParam<DType> {};

// One tile of `isa`: rows [0, mr) of x against every output, through the int8 and
// bf16 tiles (x quantized or rounded first) for those weights.
void run_tile(Isa isa, float* out, int N, const float* x, int K, const PackedLinear& w, const float* bias, int mr) {
  const int groups = (N + PackedLinear::kRows - 1) / PackedLinear::kRows;
  if (w.dtype() == DType::kBF16) {
    Bf16Rows xb;
    round_bf16_rows(x, K, mr, K, xb);
    auto tile = isa == Isa::kAvx512 ? avx512::linear_bi_bf16_tile
                : isa == Isa::kAvx2 ? avx2::linear_bi_bf16_tile
                                    : scalar::linear_bi_bf16_tile;
    tile(out, N, xb, 0, w, bias, mr, 0, groups);
    return;
  }
  if (w.dtype() == DType::kI8) {
    Q8Rows xq;
    quantize_q8_rows(x, K, mr, K, xq);
    auto tile = isa == Isa::kAvx512 ? avx512::linear_bi_q8_tile
                : isa == Isa::kAvx2 ? avx2::linear_bi_q8_tile
                                    : scalar::linear_bi_q8_tile;
    tile(out, N, xq, 0, w, bias, mr, 0, w.strips());
    return;
  }
  auto tile = isa == Isa::kAvx512 ? avx512::linear_bi_tile : isa == Isa::kAvx2 ? avx2::linear_bi_tile
                                                                              : scalar::linear_bi_tile;
  tile(out, N, x, K, w, bias, mr, 0, groups, 0, 0, 1);
}

// Against a double-precision product with the operands as the kernels see them (the
// weights widened from bf16 / int8 with its scale; x rounded to bf16, or quantized
// per 32-wide block for int8), and bit-exact per row whatever the batch and thread count, for
// every weight dtype.
TEST_P(LinearBiDtype, MatchesNaiveAndIsInvariantToBatchSizeAndThreads) {
  for (int K : {1, 7, 8, 13, 64, 100}) {
    const int N = 23, Mmax = 70;
    auto x = random_vector(Mmax * K, 1), w = random_vector(N * K, 2), b = random_vector(N, 3);
    PackedLinear packed(w.data(), N, K, GetParam());
    Q8Rows xq;
    quantize_q8_rows(x.data() + 5 * K, K, 1, K, xq);
    std::vector<float> alone(N);
    linear_bi(alone.data(), N, x.data() + 5 * K, K, packed, b.data(), 1);  // row 5 alone
    for (int n = 0; n < N; ++n) {
      double s = b[n];
      for (int k = 0; k < K; ++k) {
        const double xk = GetParam() == DType::kI8     ? xq.dequantized(0, k)
                          : GetParam() == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x[5 * K + k]))
                                                       : x[5 * K + k];
        s += xk * packed.at(n, k);
      }
      EXPECT_NEAR(alone[n], s, 1e-5 * (1 + std::fabs(s))) << "K=" << K;
    }
    int saved = num_threads();
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      for (int M : {6, 7, 8, 9, 31, 70}) {
        std::vector<float> out(M * N);
        linear_bi(out.data(), N, x.data(), K, packed, b.data(), M);
        EXPECT_EQ(std::memcmp(out.data() + 5 * N, alone.data(), N * sizeof(float)), 0)
            << "row 5 changed with M=" << M << " threads=" << threads << " K=" << K;
      }
    }
    set_num_threads(saved);
  }
}

// int8 and bf16: the same sums in the same order (int8's integer dot products are
// exact), so the AVX2 tiles give the scalar tiles' bits; f32 sums in another order
// than the scalar loop, within rounding.
TEST_P(LinearBiDtype, Avx2MatchesScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (int K : {1, 5, 8, 9, 33, 256, 300}) {
    for (int mr = 1; mr <= 3; ++mr) {
      const int N = 11;  // two full groups of 4 and a ragged one
      auto x = random_vector(mr * K, 4), w = random_vector(N * K, 5), b = random_vector(N, 6);
      PackedLinear packed(w.data(), N, K, GetParam());
      std::vector<float> o1(mr * N), o2(mr * N);
      run_tile(Isa::kAvx2, o1.data(), N, x.data(), K, packed, b.data(), mr);
      run_tile(Isa::kScalar, o2.data(), N, x.data(), K, packed, b.data(), mr);
      if (GetParam() != DType::kF32)
        EXPECT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)), 0) << "K=" << K << " mr=" << mr;
      else
        EXPECT_LT(rel_error(o1, o2), 1e-5) << "K=" << K << " mr=" << mr;
    }
  }
}

// The AVX-512 tiles hold two rows (int8: two chunks; bf16: four rows) per register
// but give the AVX2 tiles' exact bits. int8 runs on AVX-512 with VNNI only, bf16
// with AVX512_BF16 only.
TEST_P(LinearBiDtype, Avx512IsBitIdenticalToAvx2) {
  if (best_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU: the AVX-512 path is not run here";
  if (GetParam() == DType::kI8 && !cpu_features().avx512_vnni)
    GTEST_SKIP() << "no AVX512_VNNI on this CPU: the VNNI int8 path is not run here";
  if (GetParam() == DType::kBF16 && !cpu_features().avx512_bf16)
    GTEST_SKIP() << "no AVX512_BF16 on this CPU: the vdpbf16ps path is not run here";
  // N: the f32 and bf16 tiles take row groups in pairs; a pair whose second group is partial
  // (6, 13 rows), whole pairs (16) and a pair plus a lone group (11).
  for (int N : {6, 11, 13, 16})
    for (int K : {1, 5, 8, 9, 33, 100, 256, 300}) {
      // The tiles take up to 6 rows on AVX-512; AVX2 computes them 3 at a time.
      const int max_mr = GetParam() == DType::kF32    ? avx512::linear_bi_tile_max_rows()
                         : GetParam() == DType::kBF16 ? avx512::linear_bi_bf16_tile_max_rows()
                                                      : avx512::linear_bi_q8_tile_max_rows();
      for (int mr = 1; mr <= max_mr; ++mr) {
        auto x = random_vector(mr * K, 8), w = random_vector(N * K, 9), b = random_vector(N, 10);
        PackedLinear packed(w.data(), N, K, GetParam());
        std::vector<float> o1(mr * N, -1.0f), o2(mr * N, -2.0f);
        run_tile(Isa::kAvx512, o1.data(), N, x.data(), K, packed, b.data(), mr);
        for (int r = 0; r < mr; r += 3)
          run_tile(Isa::kAvx2, o2.data() + r * N, N, x.data() + r * K, K, packed, b.data(), std::min(3, mr - r));
        EXPECT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)), 0)
            << "N=" << N << " K=" << K << " mr=" << mr;
      }
    }
}

// The AMX int8 path (batches of rows, strips of 16 outputs) gives the scalar tile's
// bits for any row count, output count and K, whole strips or ragged, and for a
// range of groups that starts inside the weight.
TEST(LinearBiAmx, IsBitIdenticalToScalar) {
  if (!use_amx()) GTEST_SKIP() << "no usable AMX-INT8 on this CPU/OS: the AMX int8 path is not run here";
  for (int N : {6, 16, 23, 37, 64})
    for (int K : {1, 5, 8, 9, 33, 100, 256, 300}) {
      auto w = random_vector(N * K, 11), b = random_vector(N, 12);
      PackedLinear packed(w.data(), N, K, DType::kI8);
      for (int M : {1, 3, 4, 15, 16, 17, 33, 40}) {
        auto x = random_vector(M * K, 13 + M);
        Q8Rows xq;
        quantize_q8_rows(x.data(), K, M, K, xq);
        for (const float* bias : {static_cast<const float*>(b.data()), static_cast<const float*>(nullptr)}) {
          std::vector<float> amx_out(M * N, -1.0f), ref(M * N, -2.0f);
          amx::linear_bi_q8_rows(amx_out.data(), N, xq, 0, M, packed, bias, 0, packed.strips());
          scalar::linear_bi_q8_tile(ref.data(), N, xq, 0, packed, bias, M, 0, packed.strips());
          EXPECT_EQ(std::memcmp(amx_out.data(), ref.data(), ref.size() * sizeof(float)), 0)
              << "N=" << N << " K=" << K << " M=" << M << " bias=" << (bias != nullptr);
        }
        if (packed.strips() > 1) {  // strips [1, end) only, rows 1.. of x
          std::vector<float> part(M * N, -3.0f), ref(M * N, -3.0f);
          amx::linear_bi_q8_rows(part.data(), N, xq, 1, M - 1, packed, b.data(), 1, packed.strips());
          scalar::linear_bi_q8_tile(ref.data(), N, xq, 1, packed, b.data(), M - 1, 1, packed.strips());
          EXPECT_EQ(std::memcmp(part.data(), ref.data(), ref.size() * sizeof(float)), 0)
              << "part: N=" << N << " K=" << K << " M=" << M;
        }
      }
    }
}

// linear_bi with AMX on and off: the same bits, batch by batch.
TEST(LinearBiAmx, LinearBiGivesTheSameBitsWithAndWithoutAmx) {
  if (!use_amx()) GTEST_SKIP() << "no usable AMX-INT8 on this CPU/OS: the AMX int8 path is not run here";
  const int N = 70, K = 200;
  auto w = random_vector(N * K, 21), b = random_vector(N, 22), x = random_vector(300 * K, 23);
  PackedLinear packed(w.data(), N, K, DType::kI8);
  for (int M : {4, 9, 300}) {
    std::vector<float> with(M * N), without(M * N);
    linear_bi(with.data(), N, x.data(), K, packed, b.data(), M);
    set_amx_enabled(false);
    linear_bi(without.data(), N, x.data(), K, packed, b.data(), M);
    set_amx_enabled(true);
    EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * sizeof(float)), 0) << "M=" << M;
  }
}

// Activations for int8 weights: each 32-wide block within half a step of its scale
// (max |x| / 127), the block sums those of the stored integers, zeros past k, and
// an all-zero block stays zero.
TEST(Q8Rows, QuantizesEachBlockToItsScale) {
  const int K = 75, M = 3;
  auto x = random_vector(M * K, 12);
  for (int k = 32; k < 64; ++k) x[static_cast<size_t>(K + k)] = 0.0f;  // row 1, block 1
  Q8Rows q;
  quantize_q8_rows(x.data(), K, M, K, q);
  ASSERT_EQ(q.blocks, 3);
  ASSERT_EQ(q.ld, 96);
  for (int r = 0; r < M; ++r)
    for (int b = 0; b < q.blocks; ++b) {
      float amax = 0;
      for (int k = b * 32; k < std::min(K, b * 32 + 32); ++k) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * K + k)]));
      int32_t sum = 0;
      for (int k = b * 32; k < b * 32 + 32; ++k) {
        sum += q.row(r)[k];
        if (k >= K) {
          ASSERT_EQ(q.row(r)[k], 0);
        } else {
          ASSERT_LE(std::fabs(q.dequantized(r, k) - x[static_cast<size_t>(r * K + k)]), amax / 127.0f * 0.5f * 1.0001f);
        }
      }
      EXPECT_EQ(q.row_scales(r)[b], amax / 127.0f);
      EXPECT_EQ(q.row_bias_sums(r)[b], 128 * sum);
    }
  EXPECT_EQ(q.row_scales(1)[1], 0.0f);
}

// The AVX2 quantization gives the scalar one's bits (ties at .5 included).
TEST(Q8Rows, Avx2QuantizesAsScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (int K : {1, 7, 32, 75, 768}) {
    auto x = random_vector(K, 13);
    for (int k = 0; k < K; k += 5) x[static_cast<size_t>(k)] = (k % 3) - 1.0f + 0.5f * (k % 2);  // ties after scaling
    const int blocks = (K + 31) / 32;
    std::vector<int8_t> q1(blocks * 32), q2(blocks * 32);
    std::vector<float> s1(blocks), s2(blocks);
    std::vector<int32_t> h1(blocks), h2(blocks);
    scalar::quantize_q8_row(x.data(), K, blocks, q1.data(), s1.data(), h1.data());
    avx2::quantize_q8_row(x.data(), K, blocks, q2.data(), s2.data(), h2.data());
    EXPECT_EQ(q1, q2) << "K=" << K;
    EXPECT_EQ(s1, s2) << "K=" << K;
    EXPECT_EQ(h1, h2) << "K=" << K;
  }
}

// The stored weights are the f32 ones rounded: bf16 to nearest even (relative error
// at most 2^-9), int8 to within half a step of its block's scale, max |w| / 127.
TEST_P(LinearBiDtype, PackedWeightsRoundTheOriginals) {
  const int N = 9, K = 70;
  auto w = random_vector(N * K, 7);
  w[3 * K + 40] = 0.0f;
  const PackedLinear packed(w.data(), N, K, GetParam());
  const PackedLinear transposed = [&] {
    std::vector<float> wt(static_cast<size_t>(N) * K);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) wt[static_cast<size_t>(k) * N + n] = w[n * K + k];
    return PackedLinear::from_transposed(wt.data(), N, K, GetParam());
  }();
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      const float v = w[n * K + k], got = packed.at(n, k);
      ASSERT_EQ(got, transposed.at(n, k));
      if (GetParam() == DType::kF32) {
        ASSERT_EQ(got, v);
      } else if (GetParam() == DType::kBF16) {
        ASSERT_EQ(got, bf16_to_f32(f32_to_bf16(v)));
      } else {
        float amax = 0;
        for (int j = k / 32 * 32; j < std::min(K, k / 32 * 32 + 32); ++j) amax = std::max(amax, std::fabs(w[n * K + j]));
        ASSERT_LE(std::fabs(got - v), amax / 127.0f * 0.5f * 1.0001f) << n << "," << k;
      }
    }
  }
  EXPECT_EQ(packed.at(3, 40), 0.0f);
  // f32, bf16: 3 groups of 4 rows x 9 chunks of 8, padded. int8: one strip of 16
  // rows x 3 blocks of 32, padded, and a scale per row and block.
  if (GetParam() == DType::kI8)
    EXPECT_EQ(packed.bytes(), 16u * 96 + 16 * 3 * sizeof(float));
  else
    EXPECT_EQ(packed.bytes(), 12u * 72 * dtype_size(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(WeightDtypes, LinearBiDtype, ::testing::Values(DType::kF32, DType::kBF16, DType::kI8),
                         [](const auto& info) { return std::string(dtype_short_name(info.param)); });

struct PagedSetup {
  int H = 6, KV = 2, D = 12, bs = 4, blocks = 12;
  explicit PagedSetup(int head_dim = 12) : D(head_dim) { init(); }
  std::vector<float> k, v;
  std::vector<int32_t> table = {7, 2, 9, 0, 5, 11};  // scattered blocks, 24 positions
  PagedKv kv;
  void init() {
    k = random_vector(static_cast<size_t>(blocks) * bs * KV * D, 10);
    v = random_vector(static_cast<size_t>(blocks) * bs * KV * D, 11);
    kv.k = k.data(), kv.v = v.data(), kv.block_size = bs, kv.n_head = H, kv.n_kv_head = KV, kv.head_dim = D;
    kv.scale = 1.0f / std::sqrt(static_cast<float>(D));
  }
  const float* row(const std::vector<float>& pool, int pos, int g) const {
    return pool.data() + (static_cast<int64_t>(table[pos / bs]) * bs + pos % bs) * KV * D + g * D;
  }
};

// A PagedSetup's K and V pools stored as `dtype` slices (kv_layout.h), and the f32
// values those slices load back as: `stored` reads the slices, `loaded_back` the
// f32 copies (bf16: the rounded values; int8: the dequantized ones).
struct StoredPools {
  std::vector<uint8_t> k, v;
  std::vector<float> k_back, v_back;
  PagedKv stored, loaded_back;
  StoredPools(const PagedSetup& s, DType dtype) : k_back(s.k.size()), v_back(s.v.size()) {
    const size_t slices = s.k.size() / s.D, slice_bytes = kv_head_bytes(dtype, s.D);
    k.resize(slices * slice_bytes), v.resize(slices * slice_bytes);
    for (size_t i = 0; i < slices; ++i) {
      kv_store_slice(dtype, s.k.data() + i * s.D, s.D, k.data() + i * slice_bytes);
      kv_store_slice(dtype, s.v.data() + i * s.D, s.D, v.data() + i * slice_bytes);
      kv_load_slice(dtype, k.data() + i * slice_bytes, s.D, k_back.data() + i * s.D);
      kv_load_slice(dtype, v.data() + i * slice_bytes, s.D, v_back.data() + i * s.D);
    }
    stored = loaded_back = s.kv;
    stored.k = k.data(), stored.v = v.data(), stored.dtype = dtype;
    loaded_back.k = k_back.data(), loaded_back.v = v_back.data();
  }
  StoredPools(const StoredPools&) = delete;  // `stored` and `loaded_back` point into it
  StoredPools& operator=(const StoredPools&) = delete;
};

// head_dim 12 takes the generic path; 32, 64, 128 and 256 (Gemma) the register-blocked ones.
class PagedAttention : public ::testing::TestWithParam<int> {};

TEST_P(PagedAttention, MatchesNaive) {
  PagedSetup s(GetParam());
  const int rows = 5, first = 17;  // positions 17..21
  auto q = random_vector(rows * s.H * s.D, 12);
  std::vector<float> out(q.size());
  PagedQuery pq{q.data(), s.H * s.D, out.data(), s.H * s.D, rows, first, s.table.data()};
  paged_attention(s.kv, {pq});
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < s.H; ++h) {
      int g = h / (s.H / s.KV), ctx = first + r + 1;
      std::vector<double> p(ctx);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < ctx; ++j) {
        double d = 0;
        for (int e = 0; e < s.D; ++e) d += q[(r * s.H + h) * s.D + e] * s.row(s.k, j, g)[e];
        p[j] = d * s.kv.scale;
        mx = std::max(mx, p[j]);
      }
      for (int j = 0; j < ctx; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int e = 0; e < s.D; ++e) {
        double o = 0;
        for (int j = 0; j < ctx; ++j) o += p[j] / sum * s.row(s.v, j, g)[e];
        EXPECT_NEAR(out[(r * s.H + h) * s.D + e], o, 1e-5);
      }
    }
}

TEST_P(PagedAttention, Avx2MatchesScalarAndRowsAreIndependent) {
  PagedSetup s(GetParam());
  const int rows = 4, first = 19;
  auto q = random_vector(rows * s.H * s.D, 13);
  std::vector<float> out(q.size()), single(s.H * s.D);
  PagedQuery all{q.data(), s.H * s.D, out.data(), s.H * s.D, rows, first, s.table.data()};
  paged_attention(s.kv, {all});
  // Row 2 alone (its position is first + 2) gives the same bits.
  PagedQuery one{q.data() + 2 * s.H * s.D, s.H * s.D, single.data(), s.H * s.D, 1, first + 2, s.table.data()};
  paged_attention(s.kv, {one, all});
  EXPECT_EQ(std::memcmp(single.data(), out.data() + 2 * s.H * s.D, single.size() * sizeof(float)), 0);
  if (!cpu_has_avx2()) return;
  std::vector<float> o1(q.size()), o2(q.size()), o3(q.size()), scratch(64 * 6);  // 2 kv heads x rep 3 x 23 keys
  PagedQuery a{q.data(), s.H * s.D, o1.data(), s.H * s.D, rows, first, s.table.data()};
  PagedQuery b{q.data(), s.H * s.D, o2.data(), s.H * s.D, rows, first, s.table.data()};
  PagedQuery c{q.data(), s.H * s.D, o3.data(), s.H * s.D, rows, first, s.table.data()};
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < s.KV; ++g) {
      avx2::paged_attention_unit(s.kv, a, r, 1, g, g + 1, scratch.data());
      scalar::paged_attention_unit(s.kv, b, r, 1, g, g + 1, scratch.data());
    }
    avx2::paged_attention_unit(s.kv, c, r, 1, 0, s.KV, scratch.data());  // all kv heads in one unit
  }
  EXPECT_LT(rel_error(o1, o2), 1e-5);
  // A head's bits do not depend on how many heads its unit takes.
  EXPECT_EQ(std::memcmp(o1.data(), o3.data(), o1.size() * sizeof(float)), 0);
}

// A batch of `rows` query rows at positions first, first + 1, ... over a
// PagedSetup's block table, and the checks every K/V dtype shares.
struct PagedQueries {
  const PagedSetup& s;
  int rows, first;
  std::vector<float> q;
  PagedQueries(const PagedSetup& setup, int n_rows, int first_pos, uint64_t seed)
      : s(setup), rows(n_rows), first(first_pos), q(random_vector(n_rows * setup.H * setup.D, seed)) {}
  int64_t row_len() const { return static_cast<int64_t>(s.H) * s.D; }
  PagedQuery into(std::vector<float>& out) const {
    return PagedQuery{q.data(), row_len(), out.data(), row_len(), rows, first, s.table.data()};
  }
  // All rows through paged_attention (the dispatching entry point).
  std::vector<float> run(const PagedKv& kv) const {
    std::vector<float> out(q.size());
    paged_attention(kv, {into(out)});
    return out;
  }
  // All rows, unit by unit, through one ISA's kernel.
  template <typename Unit>
  std::vector<float> run_units(const PagedKv& kv, Unit unit) const {
    std::vector<float> out(q.size()), scratch(64 * 3);  // rep 3 x up to 23 keys
    PagedQuery pq = into(out);
    for (int r = 0; r < rows; ++r)
      for (int g = 0; g < s.KV; ++g) unit(kv, pq, r, 1, g, g + 1, scratch.data());
    return out;
  }
  // Row r alone, in a batch behind another query, gives the bits it gave in `full`.
  void expect_row_alone_identical(const PagedKv& kv, const std::vector<float>& full, int r) const {
    std::vector<float> single(row_len()), other(q.size());
    PagedQuery one{q.data() + r * row_len(), row_len(), single.data(), row_len(), 1, first + r, s.table.data()};
    paged_attention(kv, {into(other), one});
    EXPECT_EQ(std::memcmp(single.data(), full.data() + r * row_len(), single.size() * sizeof(float)), 0);
  }
};

// bf16 K/V (the --kv-cache-dtype bf16 cache): widened exactly, so the result is
// an f32 cache's over the rounded values (bit-identical on the scalar and generic
// paths; the register-blocked AVX2 path sums even and odd elements separately, so
// within float rounding there); rows stay independent of the batch; and the
// rounding moves the output by a bounded amount.
TEST_P(PagedAttention, Bf16KvEqualsF32OfRoundedValues) {
  PagedSetup s(GetParam());
  const StoredPools pools(s, DType::kBF16);
  const PagedKv &bf = pools.stored, &rounded = pools.loaded_back;
  const PagedQueries qs(s, 5, 17, 14);
  const std::vector<float> out_bf = qs.run(bf), out_rounded = qs.run(rounded), out_f32 = qs.run(s.kv);
  if (GetParam() % 16 != 0 || !cpu_has_avx2()) {
    EXPECT_EQ(std::memcmp(out_bf.data(), out_rounded.data(), out_bf.size() * sizeof(float)), 0);
  } else {
    EXPECT_LT(rel_error(out_bf, out_rounded), 1e-6);
  }
  // Against unrounded f32 K/V: bf16 keeps 8 bits of mantissa (relative rounding
  // error <= 2^-9 per element); measured 2.15e-3, 2.22e-3, 2.26e-3 relative
  // (head_dim 12, 32, 64) on these random rows.
  const double err = rel_error(out_bf, out_f32);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 3e-3) << err;
  qs.expect_row_alone_identical(bf, out_bf, 3);
  if (!cpu_has_avx2()) return;
  const std::vector<float> o1 = qs.run_units(bf, avx2::paged_attention_unit),
                           o2 = qs.run_units(bf, scalar::paged_attention_unit),
                           o3 = qs.run_units(rounded, scalar::paged_attention_unit);
  EXPECT_EQ(std::memcmp(o2.data(), o3.data(), o2.size() * sizeof(float)), 0);
  EXPECT_LT(rel_error(o1, o2), 1e-5);
}

// int8 K/V (the --kv-cache-dtype int8 cache, kv_layout.h): the result is an f32
// cache's over the dequantized values up to float rounding (the scale multiplies
// the dot product and the softmax weight instead of each element); AVX2 matches
// the scalar path; rows stay independent of the batch; and quantization moves the
// output by a bounded amount.
TEST_P(PagedAttention, Int8KvMatchesDequantizedValues) {
  PagedSetup s(GetParam());
  const StoredPools pools(s, DType::kI8);
  const PagedKv &q8 = pools.stored, &dequantized = pools.loaded_back;
  const PagedQueries qs(s, 5, 17, 15);
  const std::vector<float> out_q8 = qs.run(q8);
  // Measured 0 (generic path: it dequantizes the row first), 1.6e-7 (head_dim 32,
  // 64).
  EXPECT_LT(rel_error(out_q8, qs.run(dequantized)), 1e-6);
  // Against unquantized f32 K/V: a value is off by at most half a step, max|x| / 254
  // of its slice; measured 5.9e-3, 7.4e-3, 7.6e-3 relative (head_dim 12, 32, 64) on
  // these random rows, about 3x bf16's.
  const double err = rel_error(out_q8, qs.run(s.kv));
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 1e-2) << err;
  qs.expect_row_alone_identical(q8, out_q8, 3);
  if (!cpu_has_avx2()) return;
  // Measured 1.7e-7, 2.1e-7, 2.3e-7.
  EXPECT_LT(rel_error(qs.run_units(q8, avx2::paged_attention_unit), qs.run_units(q8, scalar::paged_attention_unit)),
            1e-6);
}

// A sliding window and soft-capped scores against the naive attention, on both
// ISAs; and the blocks wholly before every row's window are never read: pointing
// them at a block of NaNs (as if freed and reused) changes no bit.
TEST_P(PagedAttention, WindowAndSoftcapMatchNaiveAndSkipBlocksBeforeTheWindow) {
  PagedSetup s(GetParam());
  const int rows = 5, first = 17;  // positions 17..21
  auto q = random_vector(rows * s.H * s.D, 12);
  for (float& x : q) x *= 4.0f;  // large scores: the soft-cap bends them
  for (int window : {1, 3, 6, 9, 30})
    for (float softcap : {0.0f, 1.5f}) {
      SCOPED_TRACE(::testing::Message() << "window " << window << " softcap " << softcap);
      PagedKv kv = s.kv;
      kv.window = window, kv.softcap = softcap;
      std::vector<float> out(q.size());
      PagedQuery pq{q.data(), s.H * s.D, out.data(), s.H * s.D, rows, first, s.table.data()};
      paged_attention(kv, {pq});
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < s.H; ++h) {
          const int g = h / (s.H / s.KV), ctx = first + r + 1, lo = std::max(0, ctx - window);
          std::vector<double> p(ctx);
          double mx = -1e300, sum = 0;
          for (int j = lo; j < ctx; ++j) {
            double d = 0;
            for (int e = 0; e < s.D; ++e) d += q[(r * s.H + h) * s.D + e] * s.row(s.k, j, g)[e];
            p[j] = d * s.kv.scale;
            if (softcap > 0) p[j] = softcap * std::tanh(p[j] / softcap);
            mx = std::max(mx, p[j]);
          }
          for (int j = lo; j < ctx; ++j) sum += (p[j] = std::exp(p[j] - mx));
          for (int e = 0; e < s.D; ++e) {
            double o = 0;
            for (int j = lo; j < ctx; ++j) o += p[j] / sum * s.row(s.v, j, g)[e];
            EXPECT_NEAR(out[(r * s.H + h) * s.D + e], o, 2e-5);
          }
        }
      // Blocks that end before the first row's window starts: freed.
      PagedSetup freed(GetParam());
      const int first_key = kv.first_key(first);
      const int spare = 1;  // a block no position of the table uses
      for (int i = 0; i < freed.bs * freed.KV * freed.D; ++i)
        freed.k[spare * freed.bs * freed.KV * freed.D + i] = freed.v[spare * freed.bs * freed.KV * freed.D + i] = NAN;
      int n_freed = 0;
      for (int b = 0; (b + 1) * s.bs <= first_key; ++b) freed.table[b] = spare, ++n_freed;
      if (window <= 9) {
        EXPECT_GT(n_freed, 0);
      }
      PagedKv kv_freed = kv;
      kv_freed.k = freed.k.data(), kv_freed.v = freed.v.data();
      std::vector<float> out_freed(q.size());
      PagedQuery pf{q.data(), s.H * s.D, out_freed.data(), s.H * s.D, rows, first, freed.table.data()};
      paged_attention(kv_freed, {pf});
      EXPECT_EQ(std::memcmp(out.data(), out_freed.data(), out.size() * sizeof(float)), 0);
      if (!cpu_has_avx2()) continue;
      std::vector<float> o1(q.size()), o2(q.size()), scratch(64 * 6);
      PagedQuery a{q.data(), s.H * s.D, o1.data(), s.H * s.D, rows, first, s.table.data()};
      PagedQuery b{q.data(), s.H * s.D, o2.data(), s.H * s.D, rows, first, s.table.data()};
      for (int r = 0; r < rows; ++r)
        for (int g = 0; g < s.KV; ++g) {
          avx2::paged_attention_unit(kv, a, r, 1, g, g + 1, scratch.data());
          scalar::paged_attention_unit(kv, b, r, 1, g, g + 1, scratch.data());
        }
      EXPECT_LT(rel_error(o1, o2), 1e-5);
    }
}

// Units of several rows (paged_attention computes prefill chunks in units of 4)
// give each row the bits a one-row unit gives it, for every K/V dtype and however
// many keys the rows share, with and without a sliding window (the rows' windows
// start at different keys) and soft-capping; a 22-row query through
// paged_attention (grouped) gives each row the bits it gets alone.
TEST_P(PagedAttention, MultiRowUnitsGiveEachRowItsOneRowBits) {
  PagedSetup s(GetParam());
  const StoredPools bf16_pools(s, DType::kBF16), int8_pools(s, DType::kI8);
  const PagedQueries qs(s, 22, 2, 18);  // positions 2..23: every key of the table
  struct Variant { int window; float softcap; };
  for (Variant variant : {Variant{0, 0.0f}, Variant{1, 0.0f}, Variant{3, 0.0f}, Variant{6, 2.0f}, Variant{9, 0.0f},
                          Variant{17, 0.0f}}) {
  SCOPED_TRACE(::testing::Message() << "window " << variant.window << " softcap " << variant.softcap);
  PagedKv f32 = s.kv, bf = bf16_pools.stored, q8 = int8_pools.stored;
  for (PagedKv* kv : {&f32, &bf, &q8}) kv->window = variant.window, kv->softcap = variant.softcap;
  for (const PagedKv* kv : std::initializer_list<const PagedKv*>{&f32, &bf, &q8}) {
    std::vector<std::pair<const char*, decltype(&scalar::paged_attention_unit)>> units = {
        {"scalar", scalar::paged_attention_unit}};
    if (cpu_has_avx2()) units.push_back({"avx2", avx2::paged_attention_unit});
    for (auto [name, unit] : units) {
      const std::vector<float> one_row = qs.run_units(*kv, unit);
      // Groups of 1 to 5 rows, starting at every offset modulo 4.
      for (int n = 1; n <= 5; ++n) {
        std::vector<float> grouped(qs.q.size()), scratch(5 * 6 * 24);
        PagedQuery pq = qs.into(grouped);
        for (int row = 0; row < qs.rows; row += n) unit(*kv, pq, row, std::min(n, qs.rows - row), 0, s.KV, scratch.data());
        EXPECT_EQ(std::memcmp(one_row.data(), grouped.data(), grouped.size() * sizeof(float)), 0)
            << name << " " << dtype_short_name(kv->dtype) << " groups of " << n;
      }
    }
    const std::vector<float> full = qs.run(*kv);
    for (int r : {0, 5, 13, 21}) qs.expect_row_alone_identical(*kv, full, r);
  }
  }
}

// Quantizing a slice: the largest magnitude lands on +-127, the others within half
// a step, and an all-zero slice keeps scale 0 (no division by zero).
TEST(KvLayout, Int8SliceRoundTrip) {
  const int D = 13;  // odd: the scale after the values is unaligned
  std::vector<float> x = random_vector(D, 16), back(D);
  x[4] = -2.5f;  // the largest magnitude
  std::vector<uint8_t> slice(kv_head_bytes(DType::kI8, D));
  ASSERT_EQ(slice.size(), static_cast<size_t>(D) + sizeof(float));
  kv_store_slice(DType::kI8, x.data(), D, slice.data());
  const auto* q = reinterpret_cast<const int8_t*>(slice.data());
  EXPECT_EQ(q[4], -127);
  const float scale = kv_slice_scale(q, D);
  EXPECT_FLOAT_EQ(scale, 2.5f / 127.0f);
  kv_load_slice(DType::kI8, slice.data(), D, back.data());
  for (int i = 0; i < D; ++i) EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * scale * 1.0001f) << i;
  std::vector<float> zero(D, 0.0f);
  kv_store_slice(DType::kI8, zero.data(), D, slice.data());
  EXPECT_EQ(kv_slice_scale(q, D), 0.0f);
  kv_load_slice(DType::kI8, slice.data(), D, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

// A bf16 slice is the project's one codec (tensor/dtype.h): each value rounded to
// nearest even, and read back exactly.
TEST(KvLayout, Bf16SliceIsTheBf16Codec) {
  const int D = 13;
  std::vector<float> x = random_vector(D, 17), back(D);
  std::vector<uint16_t> slice(D);
  ASSERT_EQ(kv_head_bytes(DType::kBF16, D), slice.size() * sizeof(uint16_t));
  kv_store_slice(DType::kBF16, x.data(), D, slice.data());
  kv_load_slice(DType::kBF16, slice.data(), D, back.data());
  for (int i = 0; i < D; ++i) {
    EXPECT_EQ(slice[i], f32_to_bf16(x[i])) << i;
    EXPECT_EQ(back[i], bf16_to_f32(slice[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, PagedAttention, ::testing::Values(12, 32, 64, 128, 256));

}  // namespace
}  // namespace distllm::kernels
