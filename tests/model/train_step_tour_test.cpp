// The tour: one GPT-2 training step on one process, read top to bottom.
//
// This is the training path of distllm with everything that serves scale taken
// away (no parallelism, no hooks, no activation checkpointing, no chunked head):
// the kernels the real graph calls (src/distllm/kernels/), over the one flat
// parameter layout (src/distllm/model/param_layout.h), in the order the real graph
// calls them. llm.c's train_gpt2.c and tests/reference/reference_model.py tell the
// same story. The test at the bottom holds it to the real thing: TrainGraph
// (model/train_graph.h, built from train_block.h, train_head.h and
// parallel_layers.h) plus AdamW must compute the same loss, the same gradients
// and the same updated weights, bit for bit. docs/architecture.md starts here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "distllm/kernels/activation.h"
#include "distllm/kernels/attention.h"
#include "distllm/kernels/cross_entropy.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/matmul.h"
#include "distllm/kernels/norm.h"
#include "distllm/kernels/vec.h"
#include "distllm/model/train_graph.h"
#include "distllm/model/transformer.h"
#include "distllm/train/optimizer.h"

namespace distllm {
namespace {

using namespace kernels;
using Floats = std::vector<float>;

// What backward needs of one block's forward.
struct BlockActivations {
  Floats ln1, ln1_mean, ln1_rstd;  // attention's input norm
  Floats qkv, att, lse;            // fused q|k|v, attention output, its log-sum-exp
  Floats mid;                      // the residual stream after attention
  Floats ln2, ln2_mean, ln2_rstd;  // the MLP's input norm
  Floats fc, fc_gelu;              // the MLP's hidden units before and after GELU
};

struct Gpt2Step {
  const ModelConfig& cfg;
  int B, T;
  std::vector<int32_t> positions;
  std::vector<Floats> x;  // residual stream entering layer l (x[L]: after the last)
  std::vector<BlockActivations> acts;
  Floats lnf, lnf_mean, lnf_rstd, logits, losses;

  Gpt2Step(const ModelConfig& c, int batch, int seq) : cfg(c), B(batch), T(seq) {
    for (int i = 0; i < B * T; ++i) positions.push_back(i % T);
  }

  int64_t rows() const { return int64_t(B) * T; }

  AttentionArgs attention(Floats& qkv, Floats& out, Floats& lse) const {
    const int C = cfg.n_embd;
    AttentionArgs a;
    a.batch = B, a.n_head = a.n_kv_head = cfg.n_head, a.head_dim = cfg.head_dim, a.q_len = a.kv_len = T;
    a.scale = 1.0f / std::sqrt(float(cfg.head_dim));
    a.q = qkv.data(), a.k = qkv.data() + C, a.v = qkv.data() + 2 * C;  // each row is q | k | v
    a.q_row_stride = a.kv_row_stride = 3 * C, a.q_batch_stride = a.kv_batch_stride = int64_t(3) * C * T;
    a.out = out.data(), a.out_row_stride = C, a.out_batch_stride = int64_t(C) * T;
    a.lse = lse.data();
    return a;
  }

  // Returns the mean cross-entropy; leaves d(loss)/d(logits) in `logits`.
  float forward(Transformer& m, const int32_t* tokens, const int32_t* targets) {
    const ParamLayout& L = m.layout();
    const int C = cfg.n_embd, V = cfg.vocab_size, H4 = cfg.intermediate_size;
    const int64_t N = rows();
    const MatmulMode conv1d{WeightLayout::kInOut};  // GPT-2 stores block matrices [in, out]
    x.assign(cfg.n_layer + 1, Floats(N * C));
    acts.assign(cfg.n_layer, {});

    // Token and position embeddings.
    const EmbedTensors emb = L.embed(m.params());
    embedding_forward(x[0].data(), tokens, positions.data(), emb.wte, emb.wpe, N, C);

    for (int l = 0; l < cfg.n_layer; ++l) {
      const LayerTensors w = L.layer(m.params(), l);
      BlockActivations& a = acts[l];
      a.ln1.resize(N * C), a.ln1_mean.resize(N), a.ln1_rstd.resize(N), a.qkv.resize(N * 3 * C);
      a.att.resize(N * C), a.lse.resize(N * cfg.n_head), a.mid.resize(N * C), a.ln2.resize(N * C);
      a.ln2_mean.resize(N), a.ln2_rstd.resize(N), a.fc.resize(N * H4), a.fc_gelu.resize(N * H4);
      // mid = x + c_proj(attention(c_attn(ln_1(x))))
      layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x[l].data(), w.attn_norm_w,
                        w.attn_norm_b, N, C, cfg.norm_eps);
      matmul_forward(a.qkv.data(), a.ln1.data(), w.qkv_w, w.qkv_b, N, C, 3 * C, conv1d);
      attention_forward(attention(a.qkv, a.att, a.lse));
      matmul_forward(a.mid.data(), a.att.data(), w.attn_out_w, w.attn_out_b, N, C, C, conv1d);
      add_inplace(a.mid.data(), x[l].data(), N * C);
      // x' = mid + c_proj(gelu(c_fc(ln_2(mid))))
      layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(), w.mlp_norm_w,
                        w.mlp_norm_b, N, C, cfg.norm_eps);
      matmul_forward(a.fc.data(), a.ln2.data(), w.mlp_in_w, w.mlp_in_b, N, C, H4, conv1d);
      gelu_forward(a.fc_gelu.data(), a.fc.data(), N * H4);
      matmul_forward(x[l + 1].data(), a.fc_gelu.data(), w.mlp_out_w, w.mlp_out_b, N, H4, C, conv1d);
      add_inplace(x[l + 1].data(), a.mid.data(), N * C);
    }

    // Final norm, the LM head (tied: the token table, [V, C]) and the loss.
    const HeadTensors head = L.head(m.params());
    lnf.resize(N * C), lnf_mean.resize(N), lnf_rstd.resize(N), logits.resize(N * V), losses.resize(N);
    layernorm_forward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), x[cfg.n_layer].data(), head.norm_w, head.norm_b,
                      N, C, cfg.norm_eps);
    matmul_forward(logits.data(), lnf.data(), head.lm_head, nullptr, N, C, V, WeightLayout::kOutIn);
    int64_t valid = 0;
    for (int64_t i = 0; i < N; ++i) valid += targets[i] != kIgnoreIndex;
    cross_entropy_forward_backward(losses.data(), logits.data(), targets, N, V, 1.0f / float(valid));
    double total = 0;
    for (float v : losses) total += v;
    return float(total / double(valid));
  }

  // Accumulates every parameter's gradient into m.grads().
  void backward(Transformer& m, const int32_t* tokens) {
    const ParamLayout& L = m.layout();
    const int C = cfg.n_embd, V = cfg.vocab_size, H4 = cfg.intermediate_size;
    const int64_t N = rows();
    const MatmulMode conv1d{WeightLayout::kInOut};
    Floats dnorm(N * C), dresid(N * C), dqkv(N * 3 * C), datt(N * C), dfc(N * H4), dfc_gelu(N * H4);

    // The head: d(lnf) and d(token table) from d(logits), then the final norm.
    const HeadTensors head = L.head(m.params()), dhead = L.head(m.grads());
    matmul_backward_input(dnorm.data(), logits.data(), head.lm_head, N, C, V, WeightLayout::kOutIn);
    matmul_backward_weight(dhead.lm_head, nullptr, logits.data(), lnf.data(), N, C, V, WeightLayout::kOutIn);
    layernorm_backward(dresid.data(), dhead.norm_w, dhead.norm_b, dnorm.data(), x[cfg.n_layer].data(), head.norm_w,
                       lnf_mean.data(), lnf_rstd.data(), N, C);

    // The blocks, last to first; dresid is d(residual stream) on the way down.
    for (int l = cfg.n_layer - 1; l >= 0; --l) {
      const LayerTensors w = L.layer(m.params(), l), g = L.layer(m.grads(), l);
      BlockActivations& a = acts[l];
      // MLP branch.
      matmul_backward_input(dfc_gelu.data(), dresid.data(), w.mlp_out_w, N, H4, C, conv1d);
      matmul_backward_weight(g.mlp_out_w, g.mlp_out_b, dresid.data(), a.fc_gelu.data(), N, H4, C, conv1d);
      gelu_backward(dfc.data(), a.fc.data(), dfc_gelu.data(), N * H4);
      matmul_backward_input(dnorm.data(), dfc.data(), w.mlp_in_w, N, C, H4, conv1d);
      matmul_backward_weight(g.mlp_in_w, g.mlp_in_b, dfc.data(), a.ln2.data(), N, C, H4, conv1d);
      layernorm_backward(dresid.data(), g.mlp_norm_w, g.mlp_norm_b, dnorm.data(), a.mid.data(), w.mlp_norm_w,
                         a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
      // Attention branch.
      matmul_backward_input(datt.data(), dresid.data(), w.attn_out_w, N, C, C, conv1d);
      matmul_backward_weight(g.attn_out_w, g.attn_out_b, dresid.data(), a.att.data(), N, C, C, conv1d);
      attention_backward(attention(a.qkv, a.att, a.lse),
                         AttentionGrads{dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, datt.data()});
      matmul_backward_weight(g.qkv_w, g.qkv_b, dqkv.data(), a.ln1.data(), N, C, 3 * C, conv1d);
      matmul_backward_input(dnorm.data(), dqkv.data(), w.qkv_w, N, C, 3 * C, conv1d);
      layernorm_backward(dresid.data(), g.attn_norm_w, g.attn_norm_b, dnorm.data(), x[l].data(), w.attn_norm_w,
                         a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
    }

    // The embeddings: scatter-add into the rows the tokens and positions used.
    const EmbedTensors demb = L.embed(m.grads());
    embedding_backward(demb.wte, demb.wpe, dresid.data(), tokens, positions.data(), N, C);
  }
};

// One optimizer step of the tour: zero the gradients, forward, backward, then
// AdamW over the flat buffer (clipping the gradients' global norm in place, then
// the update with decoupled weight decay; train/optimizer.h).
float tour_step(Transformer& m, AdamW& adamw, const int32_t* tokens, const int32_t* targets, double lr, int B,
                int T) {
  m.zero_grad();
  Gpt2Step step(m.config(), B, T);
  const float loss = step.forward(m, tokens, targets);
  step.backward(m, tokens);
  adamw.step(m.params(), m.grads(), lr);
  return loss;
}

TEST(Tour, Gpt2TrainingStepIsTheGraphsBitForBit) {
  ModelConfig cfg;
  cfg.vocab_size = 97, cfg.n_layer = 2, cfg.n_head = 4, cfg.n_embd = 32, cfg.max_position = 64;
  cfg.normalize();
  const int B = 2, T = 24;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37 + 11) % cfg.vocab_size, targets[i] = (i * 53 + 5) % cfg.vocab_size;
  targets[7] = kIgnoreIndex;

  Transformer tour(cfg), graph_model(cfg);
  tour.init_weights(7);
  graph_model.init_weights(7);
  AdamW tour_adamw(tour.layout(), AdamWConfig{}), graph_adamw(graph_model.layout(), AdamWConfig{});
  TrainGraph graph(cfg, B, T);

  float first_loss = 0;
  for (int s = 0; s < 2; ++s) {
    const float tour_loss = tour_step(tour, tour_adamw, tokens.data(), targets.data(), 1e-3, B, T);
    graph_model.zero_grad();
    const float graph_loss = graph.forward(graph_model, tokens.data(), targets.data(), true);
    graph.backward(graph_model);
    ASSERT_EQ(tour_loss, graph_loss) << "step " << s;
    if (s == 0) first_loss = tour_loss;
    // AdamW clips the gradients in place: compare them (and the weights) after both updates.
    graph_adamw.step(graph_model.params(), graph_model.grads(), 1e-3);
    for (const ParamTensor& t : tour.layout().tensors()) {
      ASSERT_EQ(0, std::memcmp(tour.grads() + t.offset, graph_model.grads() + t.offset, sizeof(float) * t.numel))
          << "the gradient of " << t.name << ", step " << s;
      ASSERT_EQ(0, std::memcmp(tour.params() + t.offset, graph_model.params() + t.offset, sizeof(float) * t.numel))
          << t.name << " after step " << s;
    }
  }
  // And it learns: two steps lower the loss on this batch.
  Gpt2Step check(cfg, B, T);
  EXPECT_LT(check.forward(tour, tokens.data(), targets.data()), first_loss);
}

}  // namespace
}  // namespace distllm
