#include "distllm/plan/graph_costs.h"

#include <algorithm>

#include "distllm/model/param_layout.h"

namespace distllm::plan {

int64_t ring_buffer_bytes(const ModelConfig& c, int batch, int seq, int cp) {
  if (cp <= 1) return 0;
  const int64_t chunk = seq / (2 * cp), rows = static_cast<int64_t>(batch) * 2 * chunk;
  const int64_t kv_width = static_cast<int64_t>(c.n_kv_head) * c.head_dim, per_head = int64_t(batch) * c.n_head;
  // cur_ and next_ hold [k | v | dk | dv]; block_out_, block_lse_; chunk_lse_ and chunk_delta_.
  const int64_t floats = 2 * rows * 4 * kv_width + batch * chunk * c.attn_dim() + per_head * chunk +
                         2 * (2 * per_head * chunk);
  return floats * 4;
}

// Follows TrainGraph's constructor buffer by buffer (BT: this rank's tokens, R:
// the residual rows it holds).
int64_t activation_bytes(const GraphShape& g) {
  const ModelConfig& c = *g.local;
  const int64_t T = g.local_len(), BT = g.tokens(), R = g.rows, C = c.n_embd;
  // norm1, norm2 [BT, C]; mid [R, C]; four norm statistics [R]; qkv, attn, lse, mlp_in, mlp_act.
  // With per-head q/k norms (qk_norm) also their inputs and reciprocal RMS.
  const int64_t qk_heads = c.block().qk_norm ? static_cast<int64_t>(c.n_head) + c.n_kv_head : 0;
  const int64_t per_layer = BT * C * 2 + R * C + R * 4 + BT * c.qkv_dim() + BT * c.attn_dim() +
                            static_cast<int64_t>(g.batch) * c.n_head * T + BT * c.mlp_in_dim() + BT * c.mlp_act_dim() +
                            BT * qk_heads * (c.head_dim + 1) +
                            (c.block().post_norms ? 2 * R * C + 2 * R : 0);  // sandwich norms: inputs and rstd
  int64_t floats = 0;
  int checkpointed = 0;
  for (int l = g.stage.begin; l < g.stage.end; ++l) {
    floats += R * C;  // every layer's input is kept
    if (g.checkpointing.applies(l))
      ++checkpointed;
    else
      floats += per_layer;
  }
  if (checkpointed > 0) floats += per_layer;  // one shared set for recomputation
  floats += R * C;                            // the stage's output (final norm input)
  if (g.stage.last()) {
    floats += BT * C + R * 2 + BT;  // final norm output, mean, rstd, losses
    const int64_t chunk = std::min(BT, std::max<int64_t>(64, (int64_t(256) << 20) / (int64_t(g.full->vocab_size) * 4)));
    floats += chunk * c.vocab_size;  // one chunk of this shard's logits
    if (c.final_logit_softcap > 0.0f) floats += chunk * c.vocab_size;  // and its capped copy
  }
  // Backward scratch: dresid [R, C], dnorm [BT, C], dqkv, dattn, dmlp_in, dmlp_act.
  floats += R * C + BT * C + BT * c.qkv_dim() + BT * c.attn_dim() + BT * c.mlp_in_dim() + BT * c.mlp_act_dim();
  if (c.block().post_norms) floats += R * C;  // d(branch output) through a sandwich norm
  if (g.sp) floats += 2 * BT * C + R * C + 2 * C;  // partial sums, gathered gradient, own rows, norm grads
  if (g.kv_replicas > 1) floats += BT * 2 * g.full->n_kv_head * c.head_dim;
  if (qk_heads > 0 && g.full->n_head != c.n_head) floats += 2 * c.head_dim;  // tp: the q/k norms' gradient sums
  return floats * 4 + ring_buffer_bytes(c, g.batch, g.seq, g.cp);
}

double flops_per_token(const ModelConfig& c, int seq, const ActivationCheckpointing& ckpt, const StageRange& stage) {
  ParamLayout layout(c);
  const int first_layer = layout.layer_group(0);
  double matmul = 0, layer = 0;
  for (const auto& t : layout.tensors()) {
    if (t.role == TensorRole::kPositionEmbedding) continue;
    if (t.role == TensorRole::kTokenEmbedding && !c.tie_embeddings) continue;  // a lookup, not a product
    const bool in_layer = t.group != layout.embed_group() && t.group != layout.head_group();
    if (in_layer && t.shape.size() == 2) layer += static_cast<double>(t.numel);
    // A tied table's work is the head's matmul, on the last stage.
    if (in_layer ? stage.has_layer(t.group - first_layer) : stage.last()) matmul += static_cast<double>(t.numel);
  }
  const double attn = 12.0 * stage.layers() * seq * c.attn_dim();
  int recomputed = 0;
  for (int l = stage.begin; l < stage.end; ++l) recomputed += ckpt.applies(l);
  const double per_layer_fwd = 2.0 * layer / c.n_layer + 4.0 * seq * c.attn_dim();
  return 6.0 * matmul + attn + recomputed * per_layer_fwd;
}

}  // namespace distllm::plan
