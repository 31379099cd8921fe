#include "distllm/model/train_graph.h"

#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/profiler.h"
#include "distllm/base/strings.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/vec.h"

namespace distllm {

using namespace kernels;

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

int checked_batch(int batch) {
  DL_CHECK(batch > 0, "batch size must be positive, got %d", batch);
  return batch;
}

// Tokens of each sequence this rank holds (all of them without context parallelism).
int block_length(int seq_len, const ModelConfig& config, const ContextParallel& cp) {
  DL_CHECK(seq_len > 0, "sequence length must be positive, got %d", seq_len);
  DL_CHECK(seq_len <= config.max_position, "sequence length %d exceeds the model's context (%d)", seq_len,
           config.max_position);
  return cp.active() ? ContextLayout(cp.size(), cp.rank(), seq_len).local_len() : seq_len;
}

// Each row's position in its sequence: t for row b*T + t, or under context
// parallelism the position of this rank's t-th token (ContextLayout's order).
std::vector<int32_t> row_positions(int batch, int T, int seq_len, const ContextParallel& cp) {
  std::vector<int32_t> positions(static_cast<size_t>(batch) * T);
  if (cp.active()) {
    const ContextLayout held(cp.size(), cp.rank(), seq_len);
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = held.position(static_cast<int>(i % T));
  } else {
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i % T);
  }
  return positions;
}

void alloc_floats(AlignedBuffer<float>& b, int64_t n) { b.resize(static_cast<size_t>(n)); }

}  // namespace

TrainGraph::TrainGraph(const ModelConfig& config, int batch, int seq_len, ActivationCheckpointing checkpointing,
                       TensorParallel tp, ContextParallel cp, StageRange stage)
    : cfg_(graph_config(config, tp)),
      layout_(cfg_),
      tp_(tp),
      cp_(cp),
      vocab_(config.vocab_size),
      B_(checked_batch(batch)),
      T_(block_length(seq_len, cfg_, cp)),
      full_T_(seq_len),
      BT_(static_cast<int64_t>(batch) * T_),
      stage_(graph_stage(config, stage)),
      checkpointing_(checkpointing),
      positions_(row_positions(batch, T_, seq_len, cp)),
      par_(cfg_, tp, BT_),
      attention_(cfg_, B_, T_, seq_len, tp, cp, positions_.data()),
      block_(cfg_, BT_, par_, attention_, scratch_) {
  DL_CHECK(checkpointing.every >= 0, "activation checkpointing interval must be >= 0");
  const int64_t C = cfg_.n_embd, rows = par_.rows();
  if (stage_.first()) tokens_.resize(BT_);
  inputs_.resize(stage_.layers());
  layers_.resize(stage_.layers());
  bool any_checkpointed = false;
  for (int l = stage_.begin; l < stage_.end; ++l) {
    alloc_floats(inputs_[l - stage_.begin], rows * C);
    if (checkpointing_.applies(l))
      any_checkpointed = true;
    else
      block_.alloc(layers_[l - stage_.begin]);
  }
  if (any_checkpointed) block_.alloc(recompute_);
  alloc_floats(final_input_, rows * C);
  alloc_floats(dresid_, rows * C);
  block_.alloc(scratch_);
  if (stage_.last()) head_ = std::make_unique<TrainHead>(cfg_, vocab_, BT_, par_, tp_, scratch_);
}

float* TrainGraph::stage_input() {
  DL_CHECK(!stage_.first() && !inputs_.empty(), "internal error: the first pipeline stage starts from token ids");
  return inputs_[0].data();
}

size_t TrainGraph::activation_bytes() const {
  size_t n = 0;
  for (const auto& in : inputs_) n += in.size();
  n = (n + final_input_.size() + dresid_.size()) * sizeof(float);
  n += scratch_.bytes() + par_.scratch_bytes() + attention_.buffer_bytes() + (head_ ? head_->bytes() : 0);
  for (const auto& a : layers_) n += a.bytes();
  return n + recompute_.bytes();
}

void TrainGraph::set_compute_dtype(kernels::ComputeDtype d) {
  check_compute_dtype(d);
  compute_ = d;
  block_.set_matmul_mode({cfg_.block().linear_layout, d});
  if (head_) head_->set_compute_dtype(d);
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

void TrainGraph::keep_tokens(const int32_t* tokens) {
  if (!tp_.active()) {
    std::memcpy(tokens_.data(), tokens, sizeof(int32_t) * BT_);
    return;
  }
  const int v0 = tp_.plan->vocab_begin(), v1 = v0 + cfg_.vocab_size;
  for (int64_t i = 0; i < BT_; ++i) tokens_[i] = tokens[i] >= v0 && tokens[i] < v1 ? tokens[i] - v0 : -1;
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
  const TrainHooks* hooks = args.hooks;
  auto before = [&](int group) {
    if (hooks && hooks->before_group_forward) hooks->before_group_forward(group);
  };
  auto after = [&](int group) {
    if (hooks && hooks->after_group_forward) hooks->after_group_forward(group);
  };

  // Later pipeline stages start from stage_input(): no token ids to keep.
  if (stage_.first()) {
    keep_tokens(tokens);
    const int embed = layout_.embed_group();
    before(embed);
    float* first = stage_.layers() > 0 ? inputs_[0].data() : final_input_.data();
    par_.embed_forward(layout_.embed_view(src.group_params(embed)), tokens_.data(), positions_.data(), first);
    if (const float s = cfg_.embedding_scale(); s != 1.0f) scale(first, s, par_.rows() * cfg_.n_embd);
    after(embed);
  }
  for (int l = stage_.begin; l < stage_.end; ++l) {
    const int g = layout_.layer_group(l);
    before(g);
    float* out = l + 1 < stage_.end ? layer_input(l + 1) : final_input_.data();
    block_.forward(l, layout_.layer_view(src.group_params(g), l), layer_input(l), acts(l), out);
    after(g);
  }
  grad_pending_ = args.compute_grad;
  if (!stage_.last()) return 0.0f;

  const int head_g = layout_.head_group(), embed_g = layout_.embed_group();
  before(head_g);
  const bool tied = layout_.head_uses_embedding();
  const HeadTensors head = layout_.head_view(src.group_params(head_g), tied ? src.group_params(embed_g) : nullptr);
  HeadTensors dhead;
  if (args.compute_grad)
    dhead = layout_.head_view(src.group_grads(head_g), tied ? src.group_grads(embed_g) : nullptr);
  const HeadLossArgs loss{args.compute_grad, args.grad_scale, args.loss_normalizer, args.logits_out};
  const float l = head_->forward(head, dhead, final_input_.data(), targets, loss);
  // With gradients the head's backward already ran: the head group stays in use.
  if (!args.compute_grad) after(head_g);
  return l;
}

void TrainGraph::backward(ParamSource& src, const TrainHooks* hooks) {
  DL_CHECK(grad_pending_, "backward() needs a forward(compute_grad=true) first");
  grad_pending_ = false;
  auto ready = [&](int group) {
    if (hooks && hooks->group_grads_ready) hooks->group_grads_ready(group);
  };
  auto before = [&](int group) {
    if (hooks && hooks->before_group_backward) hooks->before_group_backward(group);
  };
  if (stage_.last()) {
    const int head_g = layout_.head_group();
    head_->backward(layout_.head_view(src.group_params(head_g), nullptr),
                    layout_.head_view(src.group_grads(head_g), nullptr), final_input_.data(), dresid_.data());
    ready(head_g);
  }
  // Otherwise dresid_ holds d(stage output), written by the caller.
  for (int l = stage_.end - 1; l >= stage_.begin; --l) {
    const int g = layout_.layer_group(l);
    before(g);
    const LayerTensors w = layout_.layer_view(src.group_params(g), l);
    if (checkpointing_.applies(l)) {
      // Recompute the layer's activations from its saved input. Its output is not
      // needed; the input-gradient scratch is free until the backward writes it.
      DL_PROFILE("bwd.recompute");
      block_.forward(l, w, layer_input(l), recompute_, scratch_.dnorm.data());
    }
    block_.backward(l, w, layout_.layer_view(src.group_grads(g), l), layer_input(l), acts(l), dresid_.data());
    ready(g);
  }
  if (!stage_.first()) return;  // dresid_ holds d(stage input)
  const int embed_g = layout_.embed_group();
  {
    // d(table rows) = d(scaled embedding) x the scale.
    if (const float s = cfg_.embedding_scale(); s != 1.0f) scale(dresid_.data(), s, par_.rows() * cfg_.n_embd);
    const float* dout = par_.all_rows(dresid_.data());
    DL_PROFILE("bwd.embedding");
    if (hooks && hooks->embedding_backward) {
      hooks->embedding_backward(dout, tokens_.data(), positions_.data(), BT_);
    } else {
      EmbedTensors demb = layout_.embed_view(src.group_grads(embed_g));
      embedding_backward(demb.wte, demb.wpe, dout, tokens_.data(), positions_.data(), BT_, cfg_.n_embd);
    }
  }
  ready(embed_g);
}

}  // namespace distllm
