#include "distllm/model/inference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/kernels/activation.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/linear_bi.h"
#include "distllm/kernels/logit_softcap.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/paged_attention.h"
#include "distllm/kernels/vec.h"
#include "distllm/model/block_ops.h"
#include "distllm/model/rope_scaling.h"

namespace distllm {

using namespace kernels;

InferenceModel::InferenceModel(std::shared_ptr<const Transformer> model, DType weight_dtype, InferenceTensorParallel tp)
    : InferenceModel(ModelWeights::of(std::move(model)), weight_dtype, tp) {}

InferenceModel::InferenceModel(std::shared_ptr<const ModelWeights> weights, DType weight_dtype,
                               InferenceTensorParallel tp)
    : cfg_(weights->config()), shard_(cfg_), block_(cfg_.block()), tp_(tp), weight_dtype_(weight_dtype) {
  DL_CHECK(PackedLinear::supports(weight_dtype), "--dtype must be f32, bf16 or int8, not %s",
           dtype_short_name(weight_dtype));
  if (tp_.active()) {
    const TensorParallelPlan& plan = *tp_.plan;
    DL_CHECK(tp_.comm != nullptr && tp_.comm->size() == plan.size() && tp_.comm->rank() == plan.rank(),
             "the tp group does not match the tensor-parallel plan (rank %d of %d)", plan.rank(), plan.size());
    DL_CHECK(plan.full_layout().total_size() == weights->layout().total_size() && plan.full().n_head == cfg_.n_head &&
                 plan.full().vocab_size == cfg_.vocab_size,
             "the tensor-parallel plan was made for another model than %s", cfg_.describe().c_str());
    shard_ = plan.local();
    shard_params_.resize(static_cast<size_t>(plan.local_layout().total_size()));
    // The plan slices a flat f32 buffer: weights kept in a file's dtype are widened
    // for that once, and the widened copy is dropped with the slicing.
    std::unique_ptr<Transformer> widened;
    const float* full = weights->flat_f32();
    if (full == nullptr) {
      widened = weights->to_transformer();
      full = widened->params();
    }
    plan.full_to_local(full, shard_params_.data());
    for (int r = 0; r < plan.size(); ++r) {
      auto [b, e] = TensorParallelPlan::split(cfg_.vocab_size, plan.size(), r);
      vocab_rows_.push_back(e - b);
    }
    // The shard is self-contained; the caller decides whether the whole model stays.
    weights = std::make_shared<const ModelWeights>(shard_, plan.local_layout(), shard_params_.data(), nullptr);
  }
  build(*weights);
  // Views point into a flat buffer; from any other source everything kept was copied.
  if (weights->flat_f32() != nullptr) weights_ = std::move(weights);
}

namespace {

// The layout tensor that starts at flat `offset`.
const ParamTensor& tensor_at(const ParamLayout& layout, int64_t offset) {
  const std::vector<ParamTensor>& ts = layout.tensors();
  auto it = std::lower_bound(ts.begin(), ts.end(), offset,
                             [](const ParamTensor& t, int64_t off) { return t.offset < off; });
  DL_CHECK(it != ts.end() && it->offset == offset, "no tensor starts at flat offset %lld", (long long)offset);
  return *it;
}

}  // namespace

void InferenceModel::build(const ModelWeights& w) {
  const ParamLayout& layout = w.layout();
  const float* flat = w.flat_f32();
  // Norms, biases and positions: in place in a flat buffer, else widened (small).
  // `count`: the floats to read; 0: the tensor's own. A fused bias (q|k|v, gate|up)
  // spans its adjacent tensors.
  auto small = [&](int64_t off, int64_t count = 0) -> const float* {
    if (off < 0) return nullptr;
    if (flat) return flat + off;
    const int64_t n = count > 0 ? count : tensor_at(layout, off).numel;
    AlignedBuffer<float>& copy = owned_.emplace_back(static_cast<size_t>(n));
    w.read_f32(off, n, copy.data());
    return copy.data();
  };
  // One linear [out, in] at flat `off`. GPT-2 stores Conv1D weights as [in, out]:
  // outside a flat buffer one such matrix is widened at a time to be transposed.
  // Llama's [out, in] rows are read 4 at a time, q|k|v and gate|up spanning their
  // adjacent tensors.
  const BlockSpec block = cfg_.block();
  auto pack = [&](int64_t off, int in, int out) {
    if (block.linear_layout == WeightLayout::kInOut) {
      if (flat) return PackedLinear::from_transposed(flat + off, out, in, weight_dtype_);
      AlignedBuffer<float> kn(static_cast<size_t>(in) * out);
      w.read_f32(off, static_cast<int64_t>(in) * out, kn.data());
      return PackedLinear::from_transposed(kn.data(), out, in, weight_dtype_);
    }
    if (flat) return PackedLinear(flat + off, out, in, weight_dtype_);
    return PackedLinear::from_rows(
        out, in, [&](int64_t n0, int count, float* rows) { w.read_f32(off + n0 * in, int64_t{count} * in, rows); },
        weight_dtype_);
  };
  auto plus_one = [&](const float* w, int n) -> const float* {
    AlignedBuffer<float>& copy = owned_.emplace_back(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) copy[i] = 1.0f + w[i];
    return copy.data();
  };
  const int C = cfg_.n_embd;
  layers_.resize(cfg_.n_layer);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerOffsets o = layout.layer_offsets(l);
    Layer& L = layers_[l];
    L.attn_norm_w = small(o.attn_norm_w), L.attn_norm_b = small(o.attn_norm_b);
    L.qkv_b = small(o.qkv_b, shard_.qkv_dim());
    L.attn_out_b = small(o.attn_out_b), L.mlp_norm_w = small(o.mlp_norm_w), L.mlp_norm_b = small(o.mlp_norm_b);
    L.mlp_in_b = small(o.mlp_in_b, shard_.mlp_in_dim()), L.mlp_out_b = small(o.mlp_out_b);
    L.q_norm_w = small(o.q_norm_w), L.k_norm_w = small(o.k_norm_w);
    L.attn_post_norm_w = small(o.attn_post_norm_w), L.mlp_post_norm_w = small(o.mlp_post_norm_w);
    if (L.q_norm_w && block.norm == NormKind::kRmsNormPlusOne) {
      // The per-head norm kernel scales by its weight: it gets 1 + w, computed once.
      L.q_norm_w = plus_one(L.q_norm_w, cfg_.head_dim);
      L.k_norm_w = plus_one(L.k_norm_w, cfg_.head_dim);
    }
    L.qkv = pack(o.qkv_w, C, shard_.qkv_dim());
    L.attn_out = pack(o.attn_out_w, shard_.attn_dim(), C);
    L.mlp_in = pack(o.mlp_in_w, C, shard_.mlp_in_dim());
    L.mlp_out = pack(o.mlp_out_w, shard_.mlp_act_dim(), C);
  }
  const EmbedHeadOffsets e = layout.embed_head_offsets();
  wpe_ = small(e.wpe);
  final_norm_w_ = small(e.norm_w);
  final_norm_b_ = small(e.norm_b);
  // The token table: in place in a flat buffer, else copied in the file's dtype
  // (bf16 and f16 rows are widened per token by embed()).
  const ParamTensor& wte = tensor_at(layout, e.wte);
  if (flat) {
    wte_ = flat + e.wte;
  } else {
    const TensorRef& ref = w.tensors()[static_cast<size_t>(&wte - layout.tensors().data())];
    wte_dtype_ = ref.dtype == DType::kBF16 || ref.dtype == DType::kF16 ? ref.dtype : DType::kF32;
    const size_t bytes = static_cast<size_t>(wte.numel) * dtype_size(wte_dtype_);
    wte_copy_.resize_uninitialized(bytes);
    if (wte_dtype_ == ref.dtype) std::memcpy(wte_copy_.data(), ref.data, bytes);
    else w.read_f32(e.wte, wte.numel, reinterpret_cast<float*>(wte_copy_.data()));
    wte_ = wte_copy_.data();
  }
  // [V, C] in both families (the tied head is the token table).
  const int64_t head = e.lm_head;
  lm_head_ = flat ? PackedLinear(flat + head, shard_.vocab_size, C, weight_dtype_)
                  : PackedLinear::from_rows(
                        shard_.vocab_size, C,
                        [&](int64_t n0, int count, float* rows) { w.read_f32(head + n0 * C, int64_t{count} * C, rows); },
                        weight_dtype_);
  if (block.rotary()) rope_ = rope_table(cfg_, cfg_.max_position);
  if (block.rotary() && cfg_.rope_local_theta > 0.0) local_rope_ = rope_table(cfg_, cfg_.max_position, /*local=*/true);
  w.check_source();  // what was packed is what the files held throughout
}

size_t InferenceModel::packed_weight_bytes() const {
  size_t total = lm_head_.bytes();
  for (const Layer& L : layers_) total += L.qkv.bytes() + L.attn_out.bytes() + L.mlp_in.bytes() + L.mlp_out.bytes();
  return total;
}

void InferenceModel::reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  capacity_ = std::max<int64_t>(tokens, 2 * capacity_);
  const int64_t C = cfg_.n_embd;
  x_.resize(static_cast<size_t>(capacity_ * C));
  h_.resize(static_cast<size_t>(capacity_ * C));
  qkv_.resize(static_cast<size_t>(capacity_ * shard_.qkv_dim()));
  att_.resize(static_cast<size_t>(capacity_ * shard_.attn_dim()));
  mlp_in_.resize(static_cast<size_t>(capacity_ * shard_.mlp_in_dim()));
  mlp_act_.resize(static_cast<size_t>(capacity_ * shard_.mlp_act_dim()));
  shard_tokens_.resize(static_cast<size_t>(capacity_));
}

void InferenceModel::embed(const int32_t* tokens, const int32_t* positions, int64_t N) {
  const int C = cfg_.n_embd;
  if (!tp_.active() && wte_dtype_ != DType::kF32) {
    const size_t row_bytes = static_cast<size_t>(C) * dtype_size(wte_dtype_);
    parallel_for(0, N, [&](int64_t r) {
      float* x = x_.data() + r * C;
      convert_to_f32(wte_dtype_, static_cast<const uint8_t*>(wte_) + row_bytes * tokens[r], x, static_cast<size_t>(C));
      if (wpe_) add_inplace(x, wpe_ + int64_t(positions[r]) * C, C);
    });
    return;
  }
  const float* wte = static_cast<const float*>(wte_);
  if (!tp_.active()) {
    embedding_forward(x_.data(), tokens, positions, wte, wpe_, N, C);
    return;
  }
  // This rank's rows of the table; -1 (a zero row) for the other ranks' tokens.
  const int v0 = tp_.plan->vocab_begin(), v1 = v0 + shard_.vocab_size;
  for (int64_t i = 0; i < N; ++i) shard_tokens_[i] = tokens[i] >= v0 && tokens[i] < v1 ? tokens[i] - v0 : -1;
  embedding_forward(x_.data(), shard_tokens_.data(), positions, wte, nullptr, N, C);
  tp_.comm->allreduce_sum(x_.data(), N * C);
  if (wpe_) parallel_for(0, N, [&](int64_t r) { add_inplace(x_.data() + r * C, wpe_ + int64_t(positions[r]) * C, C); });
}

void InferenceModel::row_parallel(float* out, const float* in, int in_dim, const PackedLinear& w, const float* bias,
                                  int64_t N) {
  const int C = cfg_.n_embd;
  if (!tp_.active()) {
    linear_bi(out, C, in, in_dim, w, bias, N);
    return;
  }
  linear_bi(out, C, in, in_dim, w, nullptr, N);
  {
    DL_PROFILE("infer.tp.allreduce");
    tp_.comm->allreduce_sum(out, N * C);
  }
  if (bias) parallel_for(0, N, [&](int64_t r) { add_inplace(out + r * C, bias, C); });
}

void InferenceModel::lm_head(float* logits, int64_t rows) {
  const int C = cfg_.n_embd, V = cfg_.vocab_size;
  if (!tp_.active()) {
    linear_bi(logits, V, h_.data(), C, lm_head_, nullptr, rows);
    if (cfg_.final_logit_softcap > 0.0f) logit_softcap_forward(logits, rows * V, cfg_.final_logit_softcap);
    return;
  }
  const int Vl = shard_.vocab_size, n = tp_.plan->size();
  shard_logits_.resize(static_cast<size_t>(rows * Vl));
  gathered_.resize(static_cast<size_t>(rows * V));
  linear_bi(shard_logits_.data(), Vl, h_.data(), C, lm_head_, nullptr, rows);
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) counts[r] = rows * vocab_rows_[r];
  {
    DL_PROFILE("infer.tp.allgather");
    tp_.comm->allgatherv(shard_logits_.data(), gathered_.data(), counts.data());
  }
  // Rank r's block is its [rows, V_r] columns: interleave them into [rows, V].
  int64_t at = 0, col = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t w = vocab_rows_[r];
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(logits + i * V + col, gathered_.data() + at + i * w, sizeof(float) * static_cast<size_t>(w));
    at += rows * w;
    col += w;
  }
  if (cfg_.final_logit_softcap > 0.0f) logit_softcap_forward(logits, rows * V, cfg_.final_logit_softcap);
}

void InferenceModel::norm(const float* w, const float* b, const float* in, float* out, int64_t rows) const {
  block_norm_forward(block_.norm, out, nullptr, nullptr, in, w, b, rows, cfg_.n_embd, cfg_.norm_eps);
}

void InferenceModel::forward(const std::vector<InferenceChunk>& batch, PagedKvCache& cache,
                             std::vector<float>& logits) {
  const int C = cfg_.n_embd, V = cfg_.vocab_size;
  // Validate everything up front: kernels run in parallel regions and must not throw.
  int64_t N = 0;
  int n_logits = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const InferenceChunk& c = batch[s];
    DL_CHECK(c.n > 0, "batch entry %zu has no tokens", s);
    DL_CHECK(c.start_pos >= 0 && c.start_pos + c.n <= cfg_.max_position,
             "batch entry %zu: positions [%d, %d) exceed the model's context of %d", s, c.start_pos, c.start_pos + c.n,
             cfg_.max_position);
    int64_t blocks_needed = (c.start_pos + c.n + cache.block_size() - 1) / cache.block_size();
    DL_CHECK(c.num_blocks >= blocks_needed, "batch entry %zu: block table has %d blocks, positions need %lld", s,
             c.num_blocks, (long long)blocks_needed);
    // Blocks wholly before the window of the chunk's first query may have been
    // released (kReleasedKvBlock): no layer reads them.
    const int64_t window = cfg_.kv_window();
    const int64_t released_before = window > 0 ? (c.start_pos + 1 - window) / cache.block_size() : 0;
    for (int i = 0; i < c.num_blocks; ++i) {
      if (c.block_table[i] == kReleasedKvBlock && i < released_before) continue;
      DL_CHECK(c.block_table[i] >= 0 && c.block_table[i] < cache.num_blocks(),
               "batch entry %zu: block id %d outside the cache (%d blocks)", s, c.block_table[i], cache.num_blocks());
    }
    for (int i = 0; i < c.n; ++i)
      DL_CHECK(c.tokens[i] >= 0 && c.tokens[i] < V, "batch entry %zu: token id %d outside the vocabulary [0, %d)", s,
               c.tokens[i], V);
    DL_CHECK(c.num_logits >= 0 && c.num_logits <= c.n, "batch entry %zu asks for logits of %d positions but has %d tokens",
             s, c.num_logits, c.n);
    N += c.n;
    n_logits += c.num_logits;
  }
  DL_CHECK(cache.kv_dim() == static_cast<int64_t>(shard_.n_kv_head) * shard_.head_dim,
           "the KV cache holds rows of %lld floats but this model needs %d (size the cache with shard_config())",
           (long long)cache.kv_dim(), shard_.n_kv_head * shard_.head_dim);
  logits.resize(static_cast<size_t>(n_logits) * V);
  if (N == 0) return;
  reserve(N);

  std::vector<int32_t> tokens(N), positions(N);
  std::vector<const int32_t*> tables(N);
  {
    int64_t r = 0;
    for (const auto& c : batch)
      for (int i = 0; i < c.n; ++i, ++r) {
        tokens[r] = c.tokens[i];
        positions[r] = c.start_pos + i;
        tables[r] = c.block_table;
      }
  }
  embed(tokens.data(), positions.data(), N);
  if (const float s = cfg_.embedding_scale(); s != 1.0f) scale(x_.data(), s, N * C);

  const int QKV = shard_.qkv_dim(), A = shard_.attn_dim();
  const int64_t kv_dim = cache.kv_dim();
  PagedKv kv;
  kv.block_size = cache.block_size();
  kv.dtype = cache.dtype();
  kv.n_head = shard_.n_head;
  kv.n_kv_head = shard_.n_kv_head;
  kv.head_dim = cfg_.head_dim;
  std::vector<PagedQuery> queries(batch.size());
  {
    int64_t r = 0;
    for (size_t s = 0; s < batch.size(); ++s) {
      PagedQuery& q = queries[s];
      q.q = qkv_.data() + r * QKV;
      q.q_row_stride = QKV;
      q.out = att_.data() + r * A;
      q.out_row_stride = A;
      q.n_rows = batch[s].n;
      q.first_pos = batch[s].start_pos;
      q.block_table = batch[s].block_table;
      r += batch[s].n;
    }
  }

  for (int l = 0; l < cfg_.n_layer; ++l) {
    const Layer& w = layers_[l];
    {
      DL_PROFILE("infer.norm");
      norm(w.attn_norm_w, w.attn_norm_b, x_.data(), h_.data(), N);
    }
    {
      DL_PROFILE("infer.linear.qkv");
      linear_bi(qkv_.data(), QKV, h_.data(), C, w.qkv, w.qkv_b, N);
    }
    if (w.q_norm_w) {
      DL_PROFILE("infer.qk_norm");
      head_rmsnorm_forward(qkv_.data(), N, QKV, shard_.n_head, cfg_.head_dim, w.q_norm_w, cfg_.norm_eps, nullptr,
                           nullptr);
      head_rmsnorm_forward(qkv_.data() + A, N, QKV, shard_.n_kv_head, cfg_.head_dim, w.k_norm_w, cfg_.norm_eps, nullptr,
                           nullptr);
    }
    const ModelConfig::LayerAttention variant = cfg_.layer_attention(l);
    if (block_.rotary()) {
      const kernels::RopeTable& rope = variant.local_rope ? local_rope_ : rope_;
      rope_apply(qkv_.data(), N, QKV, shard_.n_head, positions.data(), rope, false);
      rope_apply(qkv_.data() + A, N, QKV, shard_.n_kv_head, positions.data(), rope, false);
    }
    // K/V rows go into the cache in its dtype (rounded once for bf16); attention
    // then reads every position, the chunk's own included, back from the cache, so
    // a position's K/V is the same rounded value whichever chunk or batch wrote it.
    parallel_for(0, N, [&](int64_t r) {
      const float* row = qkv_.data() + r * QKV + A;
      cache.write_row(l, tables[r], positions[r], row, row + kv_dim);
    });
    kv.k = cache.k_layer(l);
    kv.v = cache.v_layer(l);
    kv.scale = variant.scale;
    kv.window = variant.window;
    kv.softcap = variant.softcap;
    {
      DL_PROFILE("infer.attention");
      paged_attention(kv, queries);
    }
    // attention output projection + residual (in place on x)
    {
      DL_PROFILE("infer.linear.attn_out");
      row_parallel(h_.data(), att_.data(), A, w.attn_out, w.attn_out_b, N);
    }
    if (w.attn_post_norm_w) norm(w.attn_post_norm_w, nullptr, h_.data(), h_.data(), N);  // in place, row by row
    add_inplace(x_.data(), h_.data(), N * C);
    {
      DL_PROFILE("infer.norm");
      norm(w.mlp_norm_w, w.mlp_norm_b, x_.data(), h_.data(), N);
    }
    {
      DL_PROFILE("infer.linear.mlp_in");
      linear_bi(mlp_in_.data(), shard_.mlp_in_dim(), h_.data(), C, w.mlp_in, w.mlp_in_b, N);
    }
    mlp_activation_forward(block_.mlp, mlp_act_.data(), mlp_in_.data(), N, shard_.mlp_act_dim());
    {
      DL_PROFILE("infer.linear.mlp_out");
      row_parallel(h_.data(), mlp_act_.data(), shard_.mlp_act_dim(), w.mlp_out, w.mlp_out_b, N);
    }
    if (w.mlp_post_norm_w) norm(w.mlp_post_norm_w, nullptr, h_.data(), h_.data(), N);
    add_inplace(x_.data(), h_.data(), N * C);
  }

  if (n_logits == 0) return;
  // Final norm and head only for the rows that sample.
  last_.resize(static_cast<size_t>(n_logits) * C);
  {
    int64_t r = 0, k = 0;
    for (const auto& c : batch) {
      r += c.n;
      if (c.num_logits > 0) {
        std::memcpy(last_.data() + k * C, x_.data() + (r - c.num_logits) * C, sizeof(float) * C * c.num_logits);
        k += c.num_logits;
      }
    }
  }
  norm(final_norm_w_, final_norm_b_, last_.data(), h_.data(), n_logits);
  {
    DL_PROFILE("infer.linear.lm_head");
    lm_head(logits.data(), n_logits);
  }
}

}  // namespace distllm
