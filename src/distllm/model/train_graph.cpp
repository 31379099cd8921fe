#include "distllm/model/train_graph.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/profiler.h"
#include "distllm/base/strings.h"
#include "distllm/kernels/activation.h"
#include "distllm/kernels/attention.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/vec.h"

namespace distllm {

using namespace kernels;

namespace {

// The output head runs over chunks of rows so the [rows, vocab] logits never need
// more than about 256 MB, yet each chunk is big enough that the weight-gradient
// sgemm (inner dimension = rows) runs efficiently and the [vocab, C] gradient is
// read and written only a few times per step.
int64_t head_chunk_rows(int64_t rows, int vocab) {
  int64_t fit = (int64_t(256) << 20) / (static_cast<int64_t>(vocab) * 4);
  return std::min(rows, std::max<int64_t>(64, fit));
}

void alloc(AlignedBuffer<float>& b, int64_t n) { b.resize(static_cast<size_t>(n)); }

}  // namespace

ActivationCheckpointing ActivationCheckpointing::parse(const std::string& text) {
  ActivationCheckpointing c;
  if (text == "none") return c;
  if (text == "all") {
    c.every = 1;
    return c;
  }
  if (text.rfind("every:", 0) == 0) {
    std::string k = text.substr(6);
    char* end = nullptr;
    long v = std::strtol(k.c_str(), &end, 10);
    DL_CHECK(!k.empty() && end && *end == '\0' && v >= 1 && v <= 1000000,
             "--activation-checkpointing every:K needs a whole number K >= 1, got '%s'", text.c_str());
    c.every = static_cast<int>(v);
    return c;
  }
  throw_error(strprintf("--activation-checkpointing must be none, all or every:K, got '%s'", text.c_str()));
}

std::string ActivationCheckpointing::describe() const {
  if (every == 0) return "none";
  if (every == 1) return "all";
  return strprintf("every:%d", every);
}

size_t TrainGraph::LayerActs::bytes() const {
  return (norm1.size() + norm1_mean.size() + norm1_rstd.size() + qkv.size() + attn.size() + lse.size() + mid.size() +
          norm2.size() + norm2_mean.size() + norm2_rstd.size() + mlp_in.size() + mlp_act.size()) *
         sizeof(float);
}

void TrainGraph::alloc_acts(LayerActs& a) {
  const int64_t C = cfg_.n_embd;
  alloc(a.norm1, BT_ * C);
  alloc(a.norm1_mean, rows_);
  alloc(a.norm1_rstd, rows_);
  alloc(a.qkv, BT_ * cfg_.qkv_dim());
  alloc(a.attn, BT_ * cfg_.attn_dim());
  alloc(a.lse, static_cast<int64_t>(B_) * cfg_.n_head * T_);
  alloc(a.mid, rows_ * C);
  alloc(a.norm2, BT_ * C);
  alloc(a.norm2_mean, rows_);
  alloc(a.norm2_rstd, rows_);
  alloc(a.mlp_in, BT_ * cfg_.mlp_in_dim());
  alloc(a.mlp_act, BT_ * cfg_.mlp_act_dim());
}

namespace {

// Under tensor parallelism the graph computes with the shard's sizes.
const ModelConfig& graph_config(const ModelConfig& config, const TensorParallel& tp) {
  config.validate();
  if (tp.plan == nullptr) return config;
  DL_CHECK(config.to_hf_json() == tp.plan->full().to_hf_json(), "the tensor-parallel plan is for another model");
  DL_CHECK(tp.plan->size() == 1 || tp.comm != nullptr, "tensor parallelism needs its group's collectives");
  return tp.plan->local();
}

// A default StageRange (no layers known) stands for the whole model.
StageRange graph_stage(const ModelConfig& config, const StageRange& stage) {
  if (stage.n_layer == 0 && stage.stages == 1) return StageRange::whole(config.n_layer);
  DL_CHECK(stage.n_layer == config.n_layer, "pipeline stage of a %d-layer model used with a %d-layer one",
           stage.n_layer, config.n_layer);
  return stage;
}

}  // namespace

namespace {

int block_length(int seq_len, const ContextParallel& cp) {
  DL_CHECK(seq_len > 0, "sequence length must be positive, got %d", seq_len);
  return cp.active() ? ContextLayout(cp.size(), cp.rank(), seq_len).local_len() : seq_len;
}

}  // namespace

TrainGraph::TrainGraph(const ModelConfig& config, int batch, int seq_len, ActivationCheckpointing checkpointing,
                       TensorParallel tp, ContextParallel cp, StageRange stage)
    : cfg_(graph_config(config, tp)),
      layout_(cfg_),
      tp_(tp),
      cp_(cp),
      vocab_(config.vocab_size),
      B_(batch),
      T_(block_length(seq_len, cp)),
      full_T_(seq_len),
      BT_(static_cast<int64_t>(batch) * T_),
      stage_(graph_stage(config, stage)),
      checkpointing_(checkpointing) {
  DL_CHECK(batch > 0, "batch size must be positive, got %d", batch);
  DL_CHECK(seq_len <= cfg_.max_position, "sequence length %d exceeds the model's context (%d)", seq_len,
           cfg_.max_position);
  DL_CHECK(checkpointing.every >= 0, "activation checkpointing interval must be >= 0");
  sp_ = tp_.active() && tp_.sequence_parallel;
  rows_ = BT_;
  if (sp_) {
    const int n = tp_.plan->size();
    DL_CHECK(BT_ >= n, "sequence parallelism needs at least %d tokens per micro-batch (batch x seq), got %lld", n,
             (long long)BT_);
    for (int r = 0; r < n; ++r) {
      auto [b, e] = TensorParallelPlan::split(BT_, n, r);
      row_counts_.push_back((e - b) * config.n_embd);
      if (r == tp_.plan->rank()) row_begin_ = b, rows_ = e - b;
    }
  }
  if (!cfg_.is_gpt2()) rope_ = RopeTable(cfg_.head_dim, seq_len, cfg_.rope_theta);
  const int64_t C = cfg_.n_embd;
  positions_.resize(BT_);
  // This rank's tokens of each sequence (all of them without context parallelism).
  if (cp_.active()) {
    const ContextLayout held(cp_.size(), cp_.rank(), seq_len);
    for (int64_t i = 0; i < BT_; ++i) positions_[i] = held.position(static_cast<int>(i % T_));
    ring_ = std::make_unique<RingAttention>(cfg_, B_, seq_len, *cp_.comm);
  } else {
    for (int64_t i = 0; i < BT_; ++i) positions_[i] = static_cast<int32_t>(i % T_);
  }
  if (stage_.first()) tokens_.resize(BT_);
  inputs_.resize(stage_.layers());
  layers_.resize(stage_.layers());
  bool any_checkpointed = false;
  for (int l = stage_.begin; l < stage_.end; ++l) {
    alloc(inputs_[l - stage_.begin], rows_ * C);
    if (checkpointing_.applies(l))
      any_checkpointed = true;
    else
      alloc_acts(layers_[l - stage_.begin]);
  }
  if (any_checkpointed) alloc_acts(recompute_);
  alloc(final_input_, rows_ * C);
  if (stage_.last()) {
    alloc(final_norm_, BT_ * C);
    alloc(final_mean_, rows_);
    alloc(final_rstd_, rows_);
    alloc(losses_, BT_);
  }
  alloc(dresid_, rows_ * C);
  if (sp_) {
    alloc(partial_, BT_ * C);
    alloc(dfull_, BT_ * C);
    alloc(dnorm_mine_, rows_ * C);
    alloc(norm_grad_, 2 * C);
  }
  alloc(dnorm_, BT_ * C);
  alloc(dqkv_, BT_ * cfg_.qkv_dim());
  alloc(dattn_, BT_ * cfg_.attn_dim());
  alloc(dmlp_in_, BT_ * cfg_.mlp_in_dim());
  alloc(dmlp_act_, BT_ * cfg_.mlp_act_dim());
  // The chunking follows the whole vocabulary, so every tp rank runs the same chunks.
  if (stage_.last()) alloc(logits_chunk_, head_chunk_rows(BT_, vocab_) * cfg_.vocab_size);
  if (tp_.active() && tp_.plan->kv_replicas() > 1)
    alloc(kv_sum_, BT_ * 2 * tp_.plan->full().n_kv_head * cfg_.head_dim);
}

float* TrainGraph::stage_input() {
  DL_CHECK(!stage_.first() && !inputs_.empty(), "internal error: the first pipeline stage starts from token ids");
  return inputs_[0].data();
}

size_t TrainGraph::activation_bytes() const {
  size_t n = 0;
  for (const auto& in : inputs_) n += in.size();
  n += final_input_.size() + final_norm_.size() + final_mean_.size() + final_rstd_.size() + losses_.size();
  n += dresid_.size() + dnorm_.size() + dqkv_.size() + dattn_.size() + dmlp_in_.size() + dmlp_act_.size() +
       logits_chunk_.size() + kv_sum_.size() + partial_.size() + dfull_.size() + dnorm_mine_.size() +
       norm_grad_.size();
  n *= sizeof(float);
  if (ring_) n += ring_->buffer_bytes();
  for (const auto& a : layers_) n += a.bytes();
  return n + recompute_.bytes();
}

void TrainGraph::norm_forward(bool first, const LayerTensors& w, const float* in, float* out, float* mean,
                              float* rstd) {
  normalize(first ? w.attn_norm_w : w.mlp_norm_w, first ? w.attn_norm_b : w.mlp_norm_b, in, out, mean, rstd);
}

void TrainGraph::normalize(const float* weight, const float* bias, const float* in, float* out, float* mean,
                           float* rstd) {
  const int C = cfg_.n_embd;
  float* mine = out + row_begin_ * C;
  if (cfg_.is_gpt2()) {
    layernorm_forward(mine, mean, rstd, in, weight, bias, rows_, C, cfg_.norm_eps);
  } else {
    rmsnorm_forward(mine, rstd, in, weight, rows_, C, cfg_.norm_eps);
  }
  if (sp_) {
    DL_PROFILE("tp.allgather");
    tp_.comm->allgatherv(mine, out, row_counts_.data());
  }
}

void TrainGraph::norm_backward(const float* weight, float* dweight, float* dbias, const float* dout, const float* in,
                               const float* mean, const float* rstd) {
  const int C = cfg_.n_embd;
  // Under sequence parallelism this rank's rows give part of the parameters'
  // gradient: computed apart (gradients accumulate over micro-steps) and summed.
  float* dw = dweight;
  float* db = dbias;
  if (sp_) {
    norm_grad_.zero();
    dw = norm_grad_.data();
    db = dbias ? dw + C : nullptr;
  }
  if (cfg_.is_gpt2()) {
    layernorm_backward(dresid_.data(), dw, db, dout, in, weight, mean, rstd, rows_, C);
  } else {
    rmsnorm_backward(dresid_.data(), dw, dout, in, weight, rstd, rows_, C);
  }
  if (sp_) {
    tp_.comm->allreduce_sum(norm_grad_.data(), db ? 2 * C : C);
    add_inplace(dweight, dw, C);
    if (dbias) add_inplace(dbias, db, C);
  }
}

const float* TrainGraph::all_rows(const float* mine) {
  if (!sp_) return mine;
  DL_PROFILE("tp.allgather");
  const int64_t C = cfg_.n_embd;
  std::memcpy(dfull_.data() + row_begin_ * C, mine, sizeof(float) * rows_ * C);
  tp_.comm->allgatherv(dfull_.data() + row_begin_ * C, dfull_.data(), row_counts_.data());
  return dfull_.data();
}

const float* TrainGraph::reduce_input_grad() {
  if (!sp_) {
    tp_allreduce(dnorm_.data(), BT_ * cfg_.n_embd);
    return dnorm_.data();
  }
  DL_PROFILE("tp.reduce_scatter");
  tp_.comm->reduce_scatter_v(dnorm_.data(), dnorm_mine_.data(), row_counts_.data());
  return dnorm_mine_.data();
}

namespace {

AttentionArgs attention_args(const ModelConfig& cfg, int B, int T, float* qkv, float* out, float* lse) {
  AttentionArgs a;
  a.batch = B;
  a.n_head = cfg.n_head;
  a.n_kv_head = cfg.n_kv_head;
  a.head_dim = cfg.head_dim;
  a.q_len = a.kv_len = T;
  a.scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
  const int64_t row = cfg.qkv_dim();
  a.q = qkv;
  a.k = qkv + cfg.attn_dim();
  a.v = qkv + cfg.attn_dim() + static_cast<int64_t>(cfg.n_kv_head) * cfg.head_dim;
  a.q_row_stride = a.kv_row_stride = row;
  a.q_batch_stride = a.kv_batch_stride = row * T;
  a.out = out;
  a.out_row_stride = cfg.attn_dim();
  a.out_batch_stride = static_cast<int64_t>(cfg.attn_dim()) * T;
  a.lse = lse;
  return a;
}

}  // namespace

void TrainGraph::set_compute_dtype(kernels::ComputeDtype d) {
  check_compute_dtype(d);
  compute_ = d;
}

MatmulMode TrainGraph::layer_matmul() const {
  return {cfg_.is_gpt2() ? WeightLayout::kInOut : WeightLayout::kOutIn, compute_};
}

void TrainGraph::layer_forward(const LayerTensors& w, const float* in, LayerActs& a, float* out) {
  const int C = cfg_.n_embd;
  const MatmulMode lay = layer_matmul();
  {
    DL_PROFILE("fwd.norm");
    norm_forward(true, w, in, a.norm1.data(), a.norm1_mean.data(), a.norm1_rstd.data());
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.qkv.data(), a.norm1.data(), w.qkv_w, w.qkv_b, BT_, C, cfg_.qkv_dim(), lay);
  }
  if (!cfg_.is_gpt2()) {
    DL_PROFILE("fwd.rope");
    rope_apply(a.qkv.data(), BT_, cfg_.qkv_dim(), cfg_.n_head, positions_.data(), rope_, false);
    rope_apply(a.qkv.data() + cfg_.attn_dim(), BT_, cfg_.qkv_dim(), cfg_.n_kv_head, positions_.data(), rope_, false);
  }
  {
    DL_PROFILE("fwd.attention");
    if (ring_)
      ring_->forward(a.qkv.data(), a.attn.data(), a.lse.data());
    else
      attention_forward(attention_args(cfg_, B_, T_, a.qkv.data(), a.attn.data(), a.lse.data()));
  }
  {
    DL_PROFILE("fwd.matmul");
    row_parallel_forward(a.mid.data(), a.attn.data(), w.attn_out_w, w.attn_out_b, cfg_.attn_dim());
  }
  {
    DL_PROFILE("fwd.residual");
    add_inplace(a.mid.data(), in, rows_ * C);
  }
  {
    DL_PROFILE("fwd.norm");
    norm_forward(false, w, a.mid.data(), a.norm2.data(), a.norm2_mean.data(), a.norm2_rstd.data());
  }
  {
    DL_PROFILE("fwd.matmul");
    matmul_forward(a.mlp_in.data(), a.norm2.data(), w.mlp_in_w, w.mlp_in_b, BT_, C, cfg_.mlp_in_dim(), lay);
  }
  if (cfg_.is_gpt2()) {
    DL_PROFILE("fwd.activation");
    gelu_forward(a.mlp_act.data(), a.mlp_in.data(), BT_ * cfg_.mlp_act_dim());
  } else {
    DL_PROFILE("fwd.activation");
    swiglu_forward(a.mlp_act.data(), a.mlp_in.data(), BT_, cfg_.intermediate_size);
  }
  {
    DL_PROFILE("fwd.matmul");
    row_parallel_forward(out, a.mlp_act.data(), w.mlp_out_w, w.mlp_out_b, cfg_.mlp_act_dim());
  }
  {
    DL_PROFILE("fwd.residual");
    add_inplace(out, a.mid.data(), rows_ * C);
  }
}

float TrainGraph::forward(Transformer& model, const int32_t* tokens, const int32_t* targets, bool compute_grad,
                          float grad_scale, float* logits_out, const TrainHooks* hooks) {
  ForwardArgs args;
  args.compute_grad = compute_grad;
  args.grad_scale = grad_scale;
  args.logits_out = logits_out;
  args.hooks = hooks;
  if (compute_grad && !model.has_grads()) model.zero_grad();
  return forward(static_cast<ParamSource&>(model), tokens, targets, args);
}

float TrainGraph::forward(ParamSource& src, const int32_t* tokens, const int32_t* targets, const ForwardArgs& args) {
  // A pipeline stage reads only what it uses: token ids on the first, targets on the last.
  for (int64_t i = 0; i < BT_ && stage_.first(); ++i)
    DL_CHECK(tokens[i] >= 0 && tokens[i] < vocab_, "token id %d at position %lld is outside the vocabulary [0, %d)",
             tokens[i], (long long)i, vocab_);
  for (int64_t i = 0; i < BT_ && stage_.last(); ++i)
    DL_CHECK(targets[i] == kIgnoreIndex || (targets[i] >= 0 && targets[i] < vocab_),
             "target id %d at position %lld is outside the vocabulary [0, %d)", targets[i], (long long)i, vocab_);
  DL_CHECK(args.loss_normalizer >= 0, "loss normalizer must be >= 0");
  DL_CHECK(!tp_.active() || args.logits_out == nullptr,
           "logits_out is not available under tensor parallelism (each rank holds a slice of the vocabulary)");
  if (!stage_.first()) {
    // Later pipeline stages start from stage_input(): no token ids to keep.
  } else if (tp_.active()) {
    // This rank's rows of the embedding table; -1 for the other ranks' tokens.
    const int v0 = tp_.plan->vocab_begin(), v1 = v0 + cfg_.vocab_size;
    for (int64_t i = 0; i < BT_; ++i) tokens_[i] = tokens[i] >= v0 && tokens[i] < v1 ? tokens[i] - v0 : -1;
  } else {
    std::memcpy(tokens_.data(), tokens, sizeof(int32_t) * BT_);
  }
  const TrainHooks* hooks = args.hooks;
  auto before = [&](int group) {
    if (hooks && hooks->before_group_forward) hooks->before_group_forward(group);
  };
  auto after = [&](int group) {
    if (hooks && hooks->after_group_forward) hooks->after_group_forward(group);
  };

  if (stage_.first()) {
    const int embed = layout_.embed_group();
    before(embed);
    EmbedTensors emb = layout_.embed_view(src.group_params(embed));
    float* first = stage_.layers() > 0 ? inputs_[0].data() : final_input_.data();
    embed_forward(emb, tokens_.data(), first);
    after(embed);
  }
  for (int l = stage_.begin; l < stage_.end; ++l) {
    const int g = layout_.layer_group(l);
    before(g);
    float* out = l + 1 < stage_.end ? layer_input(l + 1) : final_input_.data();
    layer_forward(layout_.layer_view(src.group_params(g), l), layer_input(l), acts(l), out);
    after(g);
  }
  if (!stage_.last()) {
    grad_pending_ = args.compute_grad;
    return 0.0f;
  }
  before(layout_.head_group());
  float loss = head_forward(src, targets, args);
  if (!args.compute_grad) after(layout_.head_group());
  grad_pending_ = args.compute_grad;
  return loss;
}

float TrainGraph::head_forward(ParamSource& src, const int32_t* targets, const ForwardArgs& args) {
  const int C = cfg_.n_embd, V = cfg_.vocab_size;  // V: this rank's vocabulary rows under tp
  const int head_g = layout_.head_group(), embed_g = layout_.embed_group();
  const bool tied = layout_.head_uses_embedding();
  HeadTensors head = layout_.head_view(src.group_params(head_g), tied ? src.group_params(embed_g) : nullptr);
  normalize(head.norm_w, head.norm_b, final_input_.data(), final_norm_.data(), final_mean_.data(),
            final_rstd_.data());
  valid_targets_ = 0;
  for (int64_t i = 0; i < BT_; ++i) valid_targets_ += targets[i] != kIgnoreIndex;
  normalizer_ = args.loss_normalizer > 0 ? args.loss_normalizer : valid_targets_;
  float ce_scale = normalizer_ > 0 ? args.grad_scale / static_cast<float>(normalizer_) : 0.0f;
  HeadTensors dhead;
  if (args.compute_grad) {
    dhead = layout_.head_view(src.group_grads(head_g), tied ? src.group_grads(embed_g) : nullptr);
    dnorm_.zero();
  }
  const int64_t chunk = head_chunk_rows(BT_, vocab_);
  for (int64_t r0 = 0; r0 < BT_; r0 += chunk) {
    int64_t rows = std::min(chunk, BT_ - r0);
    float* logits = logits_chunk_.data();
    const float* x = final_norm_.data() + r0 * C;
    {
      DL_PROFILE("head.matmul");
      matmul_forward(logits, x, head.lm_head, nullptr, rows, C, V, head_matmul());
    }
    if (args.logits_out) std::memcpy(args.logits_out + r0 * V, logits, sizeof(float) * rows * V);
    if (tp_.active()) {
      DL_PROFILE("head.cross_entropy");
      vocab_parallel_cross_entropy(losses_.data() + r0, logits, targets + r0, rows, V, tp_.plan->vocab_begin(),
                                   ce_scale, args.compute_grad, *tp_.comm);
      if (!args.compute_grad) continue;
    } else if (!args.compute_grad) {
      cross_entropy_forward(losses_.data() + r0, logits, targets + r0, rows, V);
      continue;
    } else {
      DL_PROFILE("head.cross_entropy");
      cross_entropy_forward_backward(losses_.data() + r0, logits, targets + r0, rows, V, ce_scale);
    }
    DL_PROFILE("head.matmul_bwd");
    matmul_backward_input(dnorm_.data() + r0 * C, logits, head.lm_head, rows, C, V, head_matmul());
    matmul_backward_weight(dhead.lm_head, nullptr, logits, x, rows, C, V, head_matmul());
  }
  // Each rank's vocabulary rows gave part of d(final norm output).
  if (args.compute_grad) final_dnorm_ = reduce_input_grad();
  double total = 0.0;
  for (int64_t i = 0; i < BT_; ++i) total += losses_[i];
  return normalizer_ > 0 ? static_cast<float>(total / static_cast<double>(normalizer_)) : 0.0f;
}

void TrainGraph::layer_backward(const LayerTensors& w, const LayerTensors& g, const float* in, LayerActs& a) {
  const int C = cfg_.n_embd;
  const MatmulMode lay = layer_matmul();
  // dresid_: d(layer output) on entry, d(layer input) on exit (this rank's rows).

  // MLP branch: out = mid + mlp_out(act(mlp_in(norm2(mid))))
  const float* dout = all_rows(dresid_.data());
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dmlp_act_.data(), dout, w.mlp_out_w, BT_, cfg_.mlp_act_dim(), C, lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.mlp_out_w, g.mlp_out_b, dout, a.mlp_act.data(), BT_, cfg_.mlp_act_dim(), C, lay);
  }
  {
    DL_PROFILE("bwd.activation");
    if (cfg_.is_gpt2())
      gelu_backward(dmlp_in_.data(), a.mlp_in.data(), dmlp_act_.data(), BT_ * cfg_.mlp_act_dim());
    else
      swiglu_backward(dmlp_in_.data(), a.mlp_in.data(), dmlp_act_.data(), BT_, cfg_.intermediate_size);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dnorm_.data(), dmlp_in_.data(), w.mlp_in_w, BT_, C, cfg_.mlp_in_dim(), lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.mlp_in_w, g.mlp_in_b, dmlp_in_.data(), a.norm2.data(), BT_, C, cfg_.mlp_in_dim(), lay);
  }
  {
    const float* dnorm = reduce_input_grad();
    DL_PROFILE("bwd.norm");
    norm_backward(w.mlp_norm_w, g.mlp_norm_w, g.mlp_norm_b, dnorm, a.mid.data(), a.norm2_mean.data(),
                  a.norm2_rstd.data());
  }

  // Attention branch: mid = input + attn_out(attention(qkv(norm1(input))))
  dout = all_rows(dresid_.data());
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dattn_.data(), dout, w.attn_out_w, BT_, cfg_.attn_dim(), C, lay);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.attn_out_w, g.attn_out_b, dout, a.attn.data(), BT_, cfg_.attn_dim(), C, lay);
  }
  AttentionArgs args = attention_args(cfg_, B_, T_, a.qkv.data(), a.attn.data(), a.lse.data());
  const int64_t kv_off = static_cast<int64_t>(cfg_.n_kv_head) * cfg_.head_dim;
  float* dq = dqkv_.data();
  float* dk = dq + cfg_.attn_dim();
  float* dv = dk + kv_off;
  {
    DL_PROFILE("bwd.attention");
    if (ring_)
      ring_->backward(a.qkv.data(), a.attn.data(), a.lse.data(), dattn_.data(), dqkv_.data());
    else
      attention_backward(args, AttentionGrads{dq, dk, dv, dattn_.data()});
  }
  if (!cfg_.is_gpt2()) {
    DL_PROFILE("bwd.rope");
    rope_apply(dq, BT_, cfg_.qkv_dim(), cfg_.n_head, positions_.data(), rope_, true);
    rope_apply(dk, BT_, cfg_.qkv_dim(), cfg_.n_kv_head, positions_.data(), rope_, true);
  }
  if (kv_sum_.size() != 0) sum_replicated_kv_grads(dk, dv);
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_weight(g.qkv_w, g.qkv_b, dqkv_.data(), a.norm1.data(), BT_, C, cfg_.qkv_dim(), lay);
  }
  if (kv_sum_.size() != 0 && tp_.plan->rank() % tp_.plan->kv_replicas() != 0) {
    // The replicated key/value heads' input gradient comes from one of their ranks
    // only; the others' is summed in by the reduction below.
    for (int64_t r = 0; r < BT_; ++r) std::memset(dk + r * cfg_.qkv_dim(), 0, sizeof(float) * 2 * kv_off);
  }
  {
    DL_PROFILE("bwd.matmul");
    matmul_backward_input(dnorm_.data(), dqkv_.data(), w.qkv_w, BT_, C, cfg_.qkv_dim(), lay);
  }
  {
    const float* dnorm = reduce_input_grad();
    DL_PROFILE("bwd.norm");
    norm_backward(w.attn_norm_w, g.attn_norm_w, g.attn_norm_b, dnorm, in, a.norm1_mean.data(), a.norm1_rstd.data());
  }
}

void TrainGraph::backward(ParamSource& src, const TrainHooks* hooks) {
  DL_CHECK(grad_pending_, "backward() needs a forward(compute_grad=true) first");
  grad_pending_ = false;
  const int C = cfg_.n_embd;
  auto ready = [&](int group) {
    if (hooks && hooks->group_grads_ready) hooks->group_grads_ready(group);
  };
  auto before = [&](int group) {
    if (hooks && hooks->before_group_backward) hooks->before_group_backward(group);
  };
  if (stage_.last()) {
    // Final norm: final_dnorm_ holds d(final_norm) from the head.
    const int head_g = layout_.head_group();
    HeadTensors head = layout_.head_view(src.group_params(head_g), nullptr);
    HeadTensors dhead = layout_.head_view(src.group_grads(head_g), nullptr);
    dresid_.zero();
    norm_backward(head.norm_w, dhead.norm_w, dhead.norm_b, final_dnorm_, final_input_.data(), final_mean_.data(),
                  final_rstd_.data());
    ready(head_g);
  }
  // Otherwise dresid_ holds d(stage output), written by the caller.
  for (int l = stage_.end - 1; l >= stage_.begin; --l) {
    const int g = layout_.layer_group(l);
    before(g);
    LayerTensors w = layout_.layer_view(src.group_params(g), l);
    if (checkpointing_.applies(l)) {
      // Recompute the layer's activations from its saved input. Its output is not
      // needed; dnorm_ is free scratch until layer_backward writes it.
      DL_PROFILE("bwd.recompute");
      layer_forward(w, layer_input(l), recompute_, dnorm_.data());
    }
    layer_backward(w, layout_.layer_view(src.group_grads(g), l), layer_input(l), acts(l));
    ready(g);
  }
  if (!stage_.first()) return;  // dresid_ holds d(stage input)
  const int embed_g = layout_.embed_group();
  {
    const float* dout = all_rows(dresid_.data());
    DL_PROFILE("bwd.embedding");
    if (hooks && hooks->embedding_backward) {
      hooks->embedding_backward(dout, tokens_.data(), positions_.data(), BT_);
    } else {
      EmbedTensors demb = layout_.embed_view(src.group_grads(embed_g));
      embedding_backward(demb.wte, demb.wpe, dout, tokens_.data(), positions_.data(), BT_, C);
    }
  }
  ready(embed_g);
}

void TrainGraph::tp_allreduce(float* data, int64_t n) {
  if (!tp_.active()) return;
  DL_PROFILE("tp.allreduce");
  tp_.comm->allreduce_sum(data, n);
}

void TrainGraph::row_parallel_forward(float* out, const float* in, const float* w, const float* b, int in_dim) {
  const int C = cfg_.n_embd;
  const MatmulMode lay = layer_matmul();
  if (!tp_.active()) {
    matmul_forward(out, in, w, b, BT_, in_dim, C, lay);
    return;
  }
  if (sp_) {
    // out holds this rank's rows: the sum of every rank's partial product of them.
    matmul_forward(partial_.data(), in, w, nullptr, BT_, in_dim, C, lay);
    DL_PROFILE("tp.reduce_scatter");
    tp_.comm->reduce_scatter_v(partial_.data(), out, row_counts_.data());
  } else {
    matmul_forward(out, in, w, nullptr, BT_, in_dim, C, lay);
    tp_allreduce(out, BT_ * C);
  }
  if (b) parallel_for(0, rows_, [&](int64_t r) { add_inplace(out + r * C, b, C); });
}

void TrainGraph::embed_forward(const EmbedTensors& emb, const int32_t* tokens, float* out) {
  const int C = cfg_.n_embd;
  if (!tp_.active()) {
    embedding_forward(out, tokens, positions_.data(), emb.wte, emb.wpe, BT_, C);
    return;
  }
  // Each token's row comes from the one rank holding it; positions are replicated,
  // so they are added after the sum (once). Sequence parallel: to the rows' owners.
  if (sp_) {
    embedding_forward(partial_.data(), tokens, positions_.data(), emb.wte, nullptr, BT_, C);
    tp_.comm->reduce_scatter_v(partial_.data(), out, row_counts_.data());
  } else {
    embedding_forward(out, tokens, positions_.data(), emb.wte, nullptr, BT_, C);
    tp_allreduce(out, BT_ * C);
  }
  const int32_t* positions = positions_.data() + row_begin_;
  if (emb.wpe)
    parallel_for(0, rows_, [&](int64_t r) { add_inplace(out + r * C, emb.wpe + int64_t(positions[r]) * C, C); });
}

void TrainGraph::sum_replicated_kv_grads(float* dk, float* dv) {
  // Ranks sharing a key/value head each hold part of its gradient (from their own
  // query heads). One all-reduce over the tp group sums every head's parts: each
  // rank writes its head's d(k) and d(v) into that head's columns, zeros elsewhere.
  DL_PROFILE("tp.kv_sum");
  const int64_t D = cfg_.head_dim, heads = tp_.plan->full().n_kv_head, row = 2 * heads * D;
  const int64_t at = tp_.plan->kv_head_begin() * D;
  kv_sum_.zero();
  for (int64_t r = 0; r < BT_; ++r) {
    std::memcpy(kv_sum_.data() + r * row + at, dk + r * cfg_.qkv_dim(), sizeof(float) * D);
    std::memcpy(kv_sum_.data() + r * row + heads * D + at, dv + r * cfg_.qkv_dim(), sizeof(float) * D);
  }
  tp_.comm->allreduce_sum(kv_sum_.data(), BT_ * row);
  for (int64_t r = 0; r < BT_; ++r) {
    std::memcpy(dk + r * cfg_.qkv_dim(), kv_sum_.data() + r * row + at, sizeof(float) * D);
    std::memcpy(dv + r * cfg_.qkv_dim(), kv_sum_.data() + r * row + heads * D + at, sizeof(float) * D);
  }
}

}  // namespace distllm
