// Paged attention (kernels/paged_attention.h) at batched-decode shapes: `seqs`
// sequences, one query row each at position `ctx`, Llama 134M's heads (12 of 64;
// also Gemma's head_dim 256),
// 12 layers' pools visited in turn as a decode step does, so K/V stream from memory
// rather than sit in cache. Blocks of the sequences are interleaved in the pool, as
// a cache that grew them together has them. Counter: K/V GB/s read.
//   build/release/bin/micro_paged_attention --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/rng.h"
#include "distllm/kernels/kv_layout.h"
#include "distllm/kernels/paged_attention.h"

namespace {

using namespace distllm;

constexpr int kLayers = 12, kBlock = 16, kLayerWidth = 768;  // kv heads x head_dim per layer

// Args: seqs, ctx (keys per query), dtype (0 f32, 1 bf16, 2 int8), head_dim (the
// heads then split 768 wide: 12 of 64, or Gemma's 3 of 256).
void BM_PagedAttentionDecode(benchmark::State& state) {
  const int seqs = static_cast<int>(state.range(0)), ctx = static_cast<int>(state.range(1));
  const int kHeadDim = static_cast<int>(state.range(3)), kHeads = kLayerWidth / kHeadDim;
  const DType dtype = state.range(2) == 0 ? DType::kF32 : state.range(2) == 1 ? DType::kBF16 : DType::kI8;
  const int blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int64_t slice = static_cast<int64_t>(kernels::kv_head_bytes(dtype, kHeadDim));
  const int64_t layer_bytes = static_cast<int64_t>(seqs) * blocks_per_seq * kBlock * kHeads * slice;
  AlignedBuffer<uint8_t> k(static_cast<size_t>(layer_bytes) * kLayers), v(static_cast<size_t>(layer_bytes) * kLayers);
  {
    CounterRng rng(3, 0, 0);
    std::vector<float> row(kHeadDim);
    for (int64_t s = 0; s < layer_bytes * kLayers / slice; ++s) {
      for (float& x : row) x = static_cast<float>(rng.uniform_double() - 0.5);
      kernels::kv_store_slice(dtype, row.data(), kHeadDim, k.data() + s * slice);
      kernels::kv_store_slice(dtype, row.data(), kHeadDim, v.data() + s * slice);
    }
  }
  std::vector<std::vector<int32_t>> tables(seqs, std::vector<int32_t>(blocks_per_seq));
  for (int s = 0; s < seqs; ++s)
    for (int b = 0; b < blocks_per_seq; ++b) tables[s][b] = b * seqs + s;  // interleaved
  std::vector<float> q(static_cast<size_t>(seqs) * kHeads * kHeadDim, 0.01f), out(q.size());
  std::vector<kernels::PagedQuery> queries(seqs);
  for (int s = 0; s < seqs; ++s) {
    auto& qu = queries[s];
    qu.q = q.data() + s * kHeads * kHeadDim, qu.q_row_stride = kHeads * kHeadDim;
    qu.out = out.data() + s * kHeads * kHeadDim, qu.out_row_stride = kHeads * kHeadDim;
    qu.n_rows = 1, qu.first_pos = ctx - 1, qu.block_table = tables[s].data();
  }
  kernels::PagedKv kv;
  kv.dtype = dtype, kv.block_size = kBlock, kv.n_head = kHeads, kv.n_kv_head = kHeads, kv.head_dim = kHeadDim;
  kv.scale = 0.125f;
  int layer = 0;
  for (auto _ : state) {
    kv.k = k.data() + layer * layer_bytes, kv.v = v.data() + layer * layer_bytes;
    kernels::paged_attention(kv, queries);
    layer = (layer + 1) % kLayers;
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * seqs * ctx * kHeads * slice;
  state.counters["KV GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedAttentionDecode)->ArgsProduct({{1, 8, 16}, {128, 512}, {0, 1, 2}, {64}})->UseRealTime();
BENCHMARK(BM_PagedAttentionDecode)->ArgsProduct({{1, 8}, {512}, {0, 1}, {256}})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
