#include "distllm/kernels/paged_attention.h"

#include <algorithm>
#include <cmath>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm::kernels {

namespace scalar {

namespace {

inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return bf16_to_f32(x); }
inline float widen(int8_t x) { return static_cast<float>(x); }

template <typename T>
void unit(const PagedKv& kv, const PagedQuery& q, int row, int g, float* scores) {
  const int D = kv.head_dim, rep = kv.n_head / kv.n_kv_head;
  const int ctx = q.first_pos + row + 1;
  const int lo = kv.first_key(q.first_pos + row);
  for (int i = 0; i < rep; ++i) {
    int h = g * rep + i;
    const float* qh = q.q + row * q.q_row_stride + static_cast<int64_t>(h) * D;
    float* s = scores + static_cast<int64_t>(i) * ctx;
    for (int j = lo; j < ctx; ++j) {
      const T* kj = kv_slice<T>(kv, kv.k, q.block_table, j, g);
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += qh[d] * widen(kj[d]);
      s[j] = dot * kv_scale(kj, D) * kv.scale;
    }
    if (kv.softcap > 0.0f) softcap_scores(s + lo, ctx - lo, kv.softcap);
    float mx = -INFINITY;
    for (int j = lo; j < ctx; ++j) mx = std::max(mx, s[j]);
    float sum = 0.0f;
    for (int j = lo; j < ctx; ++j) sum += (s[j] = std::exp(s[j] - mx));
    float* o = q.out + row * q.out_row_stride + static_cast<int64_t>(h) * D;
    for (int d = 0; d < D; ++d) o[d] = 0.0f;
    for (int j = lo; j < ctx; ++j) {
      const T* vj = kv_slice<T>(kv, kv.v, q.block_table, j, g);
      const float p = s[j] * kv_scale(vj, D);
      for (int d = 0; d < D; ++d) o[d] += p * widen(vj[d]);
    }
    for (int d = 0; d < D; ++d) o[d] /= sum;
  }
}

}  // namespace

void paged_attention_unit(const PagedKv& kv, const PagedQuery& q, int row, int n_rows, int g0, int g1,
                          float* scores) {
  for (int r = row; r < row + n_rows; ++r)
    for (int g = g0; g < g1; ++g) switch (kv.dtype) {
        case DType::kBF16: unit<uint16_t>(kv, q, r, g, scores); break;
        case DType::kI8: unit<int8_t>(kv, q, r, g, scores); break;
        default: unit<float>(kv, q, r, g, scores); break;
      }
}

}  // namespace scalar

namespace {
// A prefill chunk is computed in units of kRowsPerUnit consecutive rows, which read
// the keys they all see once for all of them (paged_attention_avx2.cpp); shorter
// queries (decode, speculative checks) one row per unit.
constexpr int kRowsPerUnit = 4;
int rows_per_unit(const PagedQuery& q) { return q.n_rows >= kPrefillQueryRows ? kRowsPerUnit : 1; }
}  // namespace

void paged_attention(const PagedKv& kv, const std::vector<PagedQuery>& queries) {
  DL_CHECK(kv_storage_supports(kv.dtype), "paged attention: K/V dtype %s is not f32, bf16 or int8",
           dtype_short_name(kv.dtype));
  // Units of (sequence, group of rows, range of kv heads): a unit reads each key's
  // row across its heads as one run (paged_attention_avx2.cpp), so units take as
  // many heads as leave about four units per thread (all of them from 8 groups up at
  // 2 threads).
  int64_t total_groups = 0;
  int max_ctx = 0;
  for (const PagedQuery& q : queries) {
    total_groups += (q.n_rows + rows_per_unit(q) - 1) / rows_per_unit(q);
    max_ctx = std::max(max_ctx, q.first_pos + q.n_rows);
  }
  if (total_groups == 0) return;
  const int64_t wanted_units = 4 * static_cast<int64_t>(num_threads());
  const int ranges =
      static_cast<int>(std::clamp<int64_t>((wanted_units + total_groups - 1) / total_groups, 1, kv.n_kv_head));
  const int heads_per_unit = (kv.n_kv_head + ranges - 1) / ranges;
  const int units_per_group = (kv.n_kv_head + heads_per_unit - 1) / heads_per_unit;
  std::vector<int64_t> first_task(queries.size() + 1, 0);
  for (size_t s = 0; s < queries.size(); ++s) {
    const int groups = (queries[s].n_rows + rows_per_unit(queries[s]) - 1) / rows_per_unit(queries[s]);
    first_task[s + 1] = first_task[s] + static_cast<int64_t>(groups) * units_per_group;
  }
  const int rep = kv.n_head / kv.n_kv_head;
  auto unit = use_avx2() ? avx2::paged_attention_unit : scalar::paged_attention_unit;
  // A unit's work grows with its position (it reads every key before it), so under a
  // causal prefill the later rows cost far more than the first: equal task counts
  // per thread left one thread with 3/4 of a 512-token prompt. Each thread gets a
  // contiguous range of about equal cost instead (each unit's result is its own).
  const int64_t tasks = first_task.back();
  std::vector<int64_t> cost_end(static_cast<size_t>(tasks));  // cost of tasks [0, t]
  int64_t cost = 0;
  for (size_t s = 0, t = 0; s < queries.size(); ++s) {
    const PagedQuery& q = queries[s];
    for (int row = 0; row < q.n_rows; row += rows_per_unit(q)) {
      int64_t group_cost = 0;
      for (int r = row; r < std::min(q.n_rows, row + rows_per_unit(q)); ++r)
        group_cost += q.first_pos + r + 1 - kv.first_key(q.first_pos + r);
      for (int u = 0; u < units_per_group; ++u, ++t) cost_end[t] = cost += group_cost;
    }
  }
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), tasks));
  parallel_chunks(0, threads, [&](int64_t t0, int64_t t1, int) {
    // Per-thread scratch that outlives the call: decode runs this every layer.
    thread_local std::vector<float> scores;
    const size_t need = static_cast<size_t>(kRowsPerUnit) * heads_per_unit * rep * max_ctx;
    if (scores.size() < need) scores.resize(need);
    // Thread slots [t0, t1) take the tasks whose cumulative cost falls in their share.
    auto task_at = [&](int64_t slot) {
      if (slot >= threads) return tasks;
      return static_cast<int64_t>(std::upper_bound(cost_end.begin(), cost_end.end(), cost * slot / threads) -
                                  cost_end.begin());
    };
    const int64_t lo = task_at(t0), hi = task_at(t1);
    if (lo >= hi) return;
    size_t s = std::upper_bound(first_task.begin(), first_task.end(), lo) - first_task.begin() - 1;
    for (int64_t t = lo; t < hi; ++t) {
      while (t >= first_task[s + 1]) ++s;
      const PagedQuery& q = queries[s];
      const int64_t local = t - first_task[s];
      const int g0 = static_cast<int>(local % units_per_group) * heads_per_unit;
      const int row = static_cast<int>(local / units_per_group) * rows_per_unit(q);
      unit(kv, q, row, std::min(rows_per_unit(q), q.n_rows - row), g0, std::min(kv.n_kv_head, g0 + heads_per_unit),
           scores.data());
    }
  });
}

}  // namespace distllm::kernels
