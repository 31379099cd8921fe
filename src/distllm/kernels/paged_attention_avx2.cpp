#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "distllm/kernels/paged_attention.h"
#include "distllm/kernels/simd_avx2.h"
#include "distllm/kernels/vec.h"

namespace distllm::kernels::avx2 {

namespace {
// A unit asks for the K (then V) rows this many keys ahead into L2. Decode reads
// the cache from memory (the weights streaming between layers evict it), and the
// hardware prefetcher does not follow a unit's short runs across blocks: Llama 134M
// with a bf16 cache, attention per step at batch 1 0.48 -> 0.25 ms, batch 8 2.33 ->
// 2.2 ms (one block of 16 keys ahead; 8, 32 and 64 measured no better).
constexpr int kPrefetchKeys = 16;

// Vector c (8 elements) of a K/V row of head_dim = 8 * NC, as f32. f32 and int8:
// elements [8c, 8c + 8) (int8 sign-extended and converted, unscaled: the callers
// apply the slice's scale once per dot product or softmax weight). bf16: the 16
// elements [16(c/2), 16(c/2) + 16) are loaded as eight 32-bit lanes, each holding an
// even element (low half) and the odd one after it (high half); even c takes the
// even elements (shift left by 16), odd c the odd ones (mask off the low half).
// Both widen exactly and need no cross-lane shuffle
// (which would compete for one port with nothing to gain). The query and output
// vectors use the same element order (lanes(), below), so dot products and weighted
// sums pair the right elements.
inline __m256 load_kv(const float* row, int c) { return _mm256_loadu_ps(row + c * 8); }
inline __m256 load_kv(const int8_t* row, int c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c * 8))));
}
inline __m256 load_kv(const uint16_t* row, int c) {
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (c >> 1) * 16));
  return _mm256_castsi256_ps((c & 1) ? _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)))
                                     : _mm256_slli_epi32(x, 16));
}
// Where lane m of vector c sits in the row: f32, int8 8c + m; bf16 16(c/2) + 2m + c%2.
template <typename T>
inline constexpr bool kInOrder = !std::is_same_v<T, uint16_t>;
template <typename T>
inline int lane_index(int c, int m) {
  if constexpr (kInOrder<T>) {
    return c * 8 + m;
  } else {
    return (c >> 1) * 16 + 2 * m + (c & 1);
  }
}
template <typename T>
inline __m256 load_q(const float* q, int c) {
  if constexpr (kInOrder<T>) {
    return _mm256_loadu_ps(q + c * 8);
  } else {
    alignas(32) float t[8];
    for (int m = 0; m < 8; ++m) t[m] = q[lane_index<T>(c, m)];
    return _mm256_load_ps(t);
  }
}
template <typename T>
inline void store_out(float* o, int c, __m256 v) {
  if constexpr (kInOrder<T>) {
    _mm256_storeu_ps(o + c * 8, v);
  } else {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    for (int m = 0; m < 8; ++m) o[lane_index<T>(c, m)] = t[m];
  }
}

// One unit: query rows [row, row + n_rows) against kv heads [g0, g1), head_dim =
// 8 * NC. Keys are taken four tokens at a time, and for each of those the unit's kv
// heads in order: a token's K (and V) row holds its kv heads one after another, so
// a unit of several heads reads each row as one run instead of hopping n_kv_head
// slices (3 KB at 12 f32 heads of 64) per key, a stride the hardware prefetcher does
// not follow across pages (batch 16 of a Llama 134M with a bf16 cache: attention
// 7.8 -> 4.7 ms per step; the next keys are prefetched, kPrefetchKeys). The keys
// every row of the unit sees are read once for all of them (a prefill's rows
// otherwise each read all keys before them from L2 again); each row then goes on
// alone over its own last keys. Every head's and row's arithmetic is the one-head,
// one-row unit's, in its order: scores for four keys reduced together (the tail
// one by one), the softmax, values accumulated keys ascending, so the bits do not
// depend on how many heads or rows a unit takes, nor on the batch.
template <int NC, typename T>
void unit_fixed(const PagedKv& kv, const PagedQuery& q, int row, int n_rows, int g0, int g1, float* scores,
                float* inv_sum) {
  constexpr int D = NC * 8;
  static_assert(kInOrder<T> || NC % 2 == 0, "bf16 rows are widened 16 elements at a time");
  constexpr bool scaled = std::is_same_v<T, int8_t>;
  const int rep = kv.n_head / kv.n_kv_head;
  const int heads = (g1 - g0) * rep;
  // Row r sees keys [lo_of(r), ctx_of(r)); both grow with r.
  auto ctx_of = [&](int r) { return q.first_pos + row + r + 1; };
  auto lo_of = [&](int r) { return kv.first_key(q.first_pos + row + r); };
  const int ctx_all = ctx_of(0), ctx_max = ctx_of(n_rows - 1);  // the first row's end / the last's
  const int lo_first = lo_of(0), lo_last = lo_of(n_rows - 1);
  // Row r's scores for its unit head h: a row of ctx_max floats.
  auto score_row = [&](int r, int h) { return scores + (static_cast<int64_t>(r) * heads + h) * ctx_max; };
  // A key's K or V row from the unit's first head on: head g's slice is (g - g0)
  // slices further. Looked up once per key (a block-table read and a division),
  // not once per key and head.
  const int64_t slice_bytes = static_cast<int64_t>(kv_head_bytes(kv.dtype, D));
  auto key_row = [&](const void* pool, int j) {
    return reinterpret_cast<const uint8_t*>(kv_slice<T>(kv, pool, q.block_table, j, g0));
  };
  auto at = [&](const uint8_t* r, int g) { return reinterpret_cast<const T*>(r + (g - g0) * slice_bytes); };
  // The unit's queries in the kernels' lane order, and its output accumulators:
  // row r's head h at (r * heads + h) * D.
  thread_local std::vector<float> qbuf, obuf;
  const size_t qo_size = static_cast<size_t>(n_rows) * heads * D;
  if (qbuf.size() < qo_size) qbuf.resize(qo_size);
  if (obuf.size() < qo_size) obuf.resize(qo_size);
  for (int r = 0; r < n_rows; ++r) {
    const float* qrow = q.q + (row + r) * q.q_row_stride + static_cast<int64_t>(g0) * rep * D;
    for (int h = 0; h < heads; ++h)
      for (int c = 0; c < NC; ++c) {
        _mm256_storeu_ps(qbuf.data() + (r * heads + h) * D + c * 8, load_q<T>(qrow + h * D, c));
        _mm256_storeu_ps(obuf.data() + (r * heads + h) * D + c * 8, _mm256_setzero_ps());
      }
  }
  const __m128 scale = _mm_set1_ps(kv.scale);
  // One prefetch stream over the unit's K rows, then its V rows, kPrefetchKeys
  // ahead of the key being read, into L2: step jp is K row jp, then V row jp - ctx,
  // null past the end. Only one-row units of short queries stream (decode);
  // longer queries read keys their own rows just wrote, from cache.
  const bool streaming = n_rows == 1 && q.n_rows < kPrefillQueryRows;
  auto stream_row = [&](int jp) -> const uint8_t* {
    if (!streaming) return nullptr;
    if (jp < ctx_all) return key_row(kv.k, jp);
    const int v = lo_first + (jp - ctx_all);
    return v < ctx_all ? key_row(kv.v, v) : nullptr;
  };
  // Per head, next to that head's own reads: a whole key row (12 heads, 24 lines
  // at bf16) asked for at once overflowed the line-fill buffers and stalled the
  // unit, which streamed at half the weights' rate.
  auto prefetch_head = [&](const uint8_t* r, int g) __attribute__((always_inline)) {
    if (!r) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(r + (g - g0) * slice_bytes);
    const uintptr_t last = first + static_cast<uintptr_t>(slice_bytes);
    for (uintptr_t a = first & ~uintptr_t{63}; a < last; a += 64)
      _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T1);
  };
  // Scores of keys [j, j + 4) for rows [r0, r1).
  auto score_quartet = [&](int j, int r0, int r1) __attribute__((always_inline)) {
    const uint8_t* rows[4];
    const uint8_t* ahead[4];
    for (int p = 0; p < 4; ++p) rows[p] = key_row(kv.k, j + p), ahead[p] = stream_row(j + p + kPrefetchKeys);
    for (int g = g0; g < g1; ++g) {
      for (int p = 0; p < 4; ++p) prefetch_head(ahead[p], g);
      const T* k0 = at(rows[0], g);
      const T* k1 = at(rows[1], g);
      const T* k2 = at(rows[2], g);
      const T* k3 = at(rows[3], g);
      for (int i = 0; i < rep; ++i) {
        const int h = (g - g0) * rep + i;
        for (int r = r0; r < r1; ++r) {
          const float* qh = qbuf.data() + (r * heads + h) * D;
          __m256 qv = _mm256_loadu_ps(qh);
          __m256 a0 = _mm256_mul_ps(qv, load_kv(k0, 0)), a1 = _mm256_mul_ps(qv, load_kv(k1, 0));
          __m256 a2 = _mm256_mul_ps(qv, load_kv(k2, 0)), a3 = _mm256_mul_ps(qv, load_kv(k3, 0));
          for (int c = 1; c < NC; ++c) {
            qv = _mm256_loadu_ps(qh + c * 8);
            a0 = _mm256_fmadd_ps(qv, load_kv(k0, c), a0);
            a1 = _mm256_fmadd_ps(qv, load_kv(k1, c), a1);
            a2 = _mm256_fmadd_ps(qv, load_kv(k2, c), a2);
            a3 = _mm256_fmadd_ps(qv, load_kv(k3, c), a3);
          }
          // Horizontal sums of four vectors at once.
          __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
          __m256 hs = _mm256_hadd_ps(h01, h23);
          __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(hs), _mm256_extractf128_ps(hs, 1));
          if constexpr (scaled) {
            sum4 = _mm_mul_ps(sum4, _mm_setr_ps(kv_scale(k0, D), kv_scale(k1, D), kv_scale(k2, D), kv_scale(k3, D)));
          }
          _mm_storeu_ps(score_row(r, h) + j, _mm_mul_ps(sum4, scale));
        }
      }
    }
  };
  // Score of key j alone for row r (a row's last keys past its multiple of four).
  auto score_one = [&](int j, int r) {
    const uint8_t* krow = key_row(kv.k, j);
    const uint8_t* ahead = stream_row(j + kPrefetchKeys);
    for (int g = g0; g < g1; ++g) {
      prefetch_head(ahead, g);
      const T* kj = at(krow, g);
      for (int i = 0; i < rep; ++i) {
        const int h = (g - g0) * rep + i;
        const float* qh = qbuf.data() + (r * heads + h) * D;
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qh), load_kv(kj, 0));
        for (int c = 1; c < NC; ++c) a = _mm256_fmadd_ps(_mm256_loadu_ps(qh + c * 8), load_kv(kj, c), a);
        score_row(r, h)[j] = simd::hsum(a) * kv_scale(kj, D) * kv.scale;
      }
    }
  };
  // Values of keys [j0, j1) (at most 4) weighted into rows [r0, r1), per head with
  // its accumulators in registers (stored between runs: the sums are the same).
  constexpr int kKeysPerRun = 4;
  auto weigh_values = [&](int j0, int j1, int r0, int r1) __attribute__((always_inline)) {
    const uint8_t* rows[kKeysPerRun];
    const uint8_t* ahead[kKeysPerRun];
    // The stream's V part starts after the K rows (one-row units only).
    for (int jj = j0; jj < j1; ++jj)
      rows[jj - j0] = key_row(kv.v, jj), ahead[jj - j0] = stream_row(ctx_all + (jj - lo_first) + kPrefetchKeys);
    for (int g = g0; g < g1; ++g) {
      for (int jj = j0; jj < j1; ++jj) prefetch_head(ahead[jj - j0], g);
      for (int i = 0; i < rep; ++i) {
        const int h = (g - g0) * rep + i;
        for (int r = r0; r < r1; ++r) {
          float* oh = obuf.data() + (r * heads + h) * D;
          const float* s = score_row(r, h);
          __m256 o[NC];
          for (int c = 0; c < NC; ++c) o[c] = _mm256_loadu_ps(oh + c * 8);
          for (int jj = j0; jj < j1; ++jj) {
            const T* vj = at(rows[jj - j0], g);
            __m256 p = _mm256_set1_ps(s[jj] * kv_scale(vj, D));
            for (int c = 0; c < NC; ++c) o[c] = _mm256_fmadd_ps(p, load_kv(vj, c), o[c]);
          }
          for (int c = 0; c < NC; ++c) _mm256_storeu_ps(oh + c * 8, o[c]);
        }
      }
    }
  };

  // Scores. A row takes its keys four at a time from the first multiple of four
  // in its range to the last, one by one before and after (a one-row unit's
  // schedule, so the bits do not depend on the unit). The quartets every row has
  // are computed once for all rows, then each row's own.
  auto quartets_of = [&](int r) {  // [first, end) of row r's quartets; empty: first == end
    const int first = (lo_of(r) + 3) / 4 * 4, end = ctx_of(r) / 4 * 4;
    return first < end ? std::pair{first, end} : std::pair{ctx_of(r), ctx_of(r)};
  };
  int shared_begin = 0, shared_end = 0;  // the quartets every row has
  {
    const auto first = quartets_of(0), last = quartets_of(n_rows - 1);
    if (first.first < first.second && last.first < last.second && last.first < first.second)
      shared_begin = last.first, shared_end = first.second;
  }
  for (int j = shared_begin; j < shared_end; j += 4) score_quartet(j, 0, n_rows);
  for (int r = 0; r < n_rows; ++r) {
    const auto [qa, qb] = quartets_of(r);
    for (int j = lo_of(r); j < qa; ++j) score_one(j, r);
    if (shared_begin < shared_end) {  // qa <= shared_begin and shared_end <= qb
      for (int j = qa; j < shared_begin; j += 4) score_quartet(j, r, r + 1);
      for (int j = shared_end; j < qb; j += 4) score_quartet(j, r, r + 1);
    } else {
      for (int j = qa; j < qb; j += 4) score_quartet(j, r, r + 1);
    }
    for (int j = qb; j < ctx_of(r); ++j) score_one(j, r);
  }
  // Softmax numerators in place; the normaliser is applied at the end.
  for (int r = 0; r < n_rows; ++r)
    for (int h = 0; h < heads; ++h) {
      float* s = score_row(r, h) + lo_of(r);
      const int n = ctx_of(r) - lo_of(r);
      if (kv.softcap > 0.0f) softcap_scores(s, n, kv.softcap);
      inv_sum[r * heads + h] = 1.0f / exp_minus_max_inplace(s, n, max_value(s, n));
    }
  // Values, keys ascending for each row: the keys before those every row sees (a
  // window's start moves with the row), those every row sees for all rows at once,
  // then each row's last ones.
  const bool shared_values = lo_last < ctx_all;  // [lo_last, ctx_all) is every row's
  const int v0 = lo_last, v1 = ctx_all;
  auto weigh_run = [&](int j0, int j1, int r0, int r1) {
    for (; j0 < j1; j0 += kKeysPerRun) weigh_values(j0, std::min(j0 + kKeysPerRun, j1), r0, r1);
  };
  for (int r = 0; r < n_rows; ++r) weigh_run(lo_of(r), shared_values ? v0 : ctx_of(r), r, r + 1);
  if (shared_values) {
    weigh_run(v0, v1, 0, n_rows);
    for (int r = 0; r < n_rows; ++r) weigh_run(v1, ctx_of(r), r, r + 1);
  }
  for (int r = 0; r < n_rows; ++r) {
    float* orow = q.out + (row + r) * q.out_row_stride + static_cast<int64_t>(g0) * rep * D;
    for (int h = 0; h < heads; ++h) {
      __m256 inv = _mm256_set1_ps(inv_sum[r * heads + h]);
      for (int c = 0; c < NC; ++c)
        store_out<T>(orow + h * D, c, _mm256_mul_ps(_mm256_loadu_ps(obuf.data() + (r * heads + h) * D + c * 8), inv));
    }
  }
}

// Any head_dim: vector primitives over memory (bf16 and int8 rows are widened into
// a per-thread f32 row first, int8 times its scale).
template <typename T>
void unit_generic(const PagedKv& kv, const PagedQuery& q, int row, int g, float* scores, float* inv_sum) {
  const int D = kv.head_dim, rep = kv.n_head / kv.n_kv_head;
  const int ctx = q.first_pos + row + 1;
  const int lo = kv.first_key(q.first_pos + row);
  const float* qrow = q.q + row * q.q_row_stride + static_cast<int64_t>(g) * rep * D;
  float* orow = q.out + row * q.out_row_stride + static_cast<int64_t>(g) * rep * D;
  thread_local std::vector<float> wide;
  auto key_row = [&](const void* base, int j) -> const float* {
    const T* r = kv_slice<T>(kv, base, q.block_table, j, g);
    if constexpr (std::is_same_v<T, float>) {
      return r;
    } else {
      if (wide.size() < static_cast<size_t>(D)) wide.resize(D);
      kv_load_slice(kv.dtype, r, D, wide.data());
      return wide.data();
    }
  };
  for (int j = lo; j < ctx; ++j) {
    const float* kj = key_row(kv.k, j);
    for (int i = 0; i < rep; ++i) scores[static_cast<int64_t>(i) * ctx + j] = dot(qrow + i * D, kj, D) * kv.scale;
  }
  for (int i = 0; i < rep; ++i) {
    float* s = scores + static_cast<int64_t>(i) * ctx;
    if (kv.softcap > 0.0f) softcap_scores(s + lo, ctx - lo, kv.softcap);
    float mx = max_value(s + lo, ctx - lo);
    float sum = 0.0f;
    for (int j = lo; j < ctx; ++j) sum += (s[j] = std::exp(s[j] - mx));
    inv_sum[i] = 1.0f / sum;
    float* o = orow + i * D;
    for (int d = 0; d < D; ++d) o[d] = 0.0f;
  }
  for (int j = lo; j < ctx; ++j) {
    const float* vj = key_row(kv.v, j);
    for (int i = 0; i < rep; ++i) axpy(orow + i * D, scores[static_cast<int64_t>(i) * ctx + j], vj, D);
  }
  for (int i = 0; i < rep; ++i) scale(orow + i * D, inv_sum[i], D);
}

template <typename T>
void dispatch(const PagedKv& kv, const PagedQuery& q, int row, int n_rows, int g0, int g1, float* scores,
              float* inv_sum) {
  switch (kv.head_dim) {
    case 32: unit_fixed<4, T>(kv, q, row, n_rows, g0, g1, scores, inv_sum); return;
    case 64: unit_fixed<8, T>(kv, q, row, n_rows, g0, g1, scores, inv_sum); return;
    case 80: unit_fixed<10, T>(kv, q, row, n_rows, g0, g1, scores, inv_sum); return;
    case 96: unit_fixed<12, T>(kv, q, row, n_rows, g0, g1, scores, inv_sum); return;
    case 128: unit_fixed<16, T>(kv, q, row, n_rows, g0, g1, scores, inv_sum); return;
    case 256: unit_fixed<32, T>(kv, q, row, n_rows, g0, g1, scores, inv_sum); return;  // Gemma
    default:
      for (int r = row; r < row + n_rows; ++r)
        for (int g = g0; g < g1; ++g) unit_generic<T>(kv, q, r, g, scores, inv_sum);
      return;
  }
}

}  // namespace

void paged_attention_unit(const PagedKv& kv, const PagedQuery& q, int row, int n_rows, int g0, int g1,
                          float* scores) {
  const int heads = (g1 - g0) * (kv.n_head / kv.n_kv_head);
  thread_local std::vector<float> inv_sum;
  if (inv_sum.size() < static_cast<size_t>(n_rows) * heads) inv_sum.resize(static_cast<size_t>(n_rows) * heads);
  switch (kv.dtype) {
    case DType::kBF16: dispatch<uint16_t>(kv, q, row, n_rows, g0, g1, scores, inv_sum.data()); return;
    case DType::kI8: dispatch<int8_t>(kv, q, row, n_rows, g0, g1, scores, inv_sum.data()); return;
    default: dispatch<float>(kv, q, row, n_rows, g0, g1, scores, inv_sum.data()); return;
  }
}

}  // namespace distllm::kernels::avx2
