// The seam between the serving engine and the model.
//
// The engine (scheduler, KV cache manager, sampler) decides *what* runs in a step;
// a ModelRunner only executes it: one batched forward over every scheduled sequence,
// reading and writing K/V through the block tables it is handed. It never chooses
// which sequences run, never allocates blocks and never samples.
//
// Paged KV cache contract
// -----------------------
// The runner owns the K/V storage: `allocate_kv(num_blocks, block_size)` is called
// once, and from then on a "block id" b in [0, num_blocks) names the storage for
// `block_size` consecutive token positions of one sequence, in every layer.
// Position p of a sequence lives in block `block_table[p / block_size]`, slot
// `p % block_size`.
//
// Sharing invariant (why the prefix cache needs no copy-on-write): two sequences'
// block tables may point at the same physical blocks, but only for *full* blocks
// of a shared prefix, i.e. blocks covering positions [0, k*block_size) whose K/V
// is already computed. The engine guarantees every chunk starts at
// `start_pos >= k*block_size` for any shared block it references, and the runner
// writes K/V only for positions >= start_pos, so a shared block is never written
// after it is shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/kernels/kv_layout.h"
#include "distllm/tensor/dtype.h"

namespace distllm::serve {

struct KvGeometry {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int dtype_bytes = 4;  // bytes per stored K or V element (4 for f32, 2 for bf16, 1 for int8)
  DType dtype = DType::kF32;  // the stored element type (dtype_bytes == dtype_size(dtype))
  // Every layer attends only within the last `sliding_window` keys
  // (ModelConfig::kv_window): blocks before a sequence's window are never read
  // again. 0: some layer reads every key.
  int sliding_window = 0;

  // K and V for one token across all layers (int8: with their scales, kv_layout.h).
  size_t bytes_per_token() const {
    return 2ull * static_cast<size_t>(num_layers) * num_kv_heads * kernels::kv_head_bytes(dtype, head_dim);
  }
};

// One scheduled sequence in a step.
struct SequenceChunk {
  uint64_t request_id = 0;
  // Tokens to run now: a prefill chunk, or the one newest token for decode.
  std::vector<int32_t> tokens;
  // Position of tokens[0]. K/V for positions [0, start_pos) is already in the cache.
  int32_t start_pos = 0;
  // Physical block ids covering positions [0, start_pos + tokens.size()).
  std::vector<int32_t> block_table;
  // Logits wanted for the chunk's last num_logits positions. 0: none (a prefill
  // chunk that does not reach the newest token); 1: the chunk ends at the newest
  // token, which samples the next one; 1 + k: a speculative decode [newest token,
  // k draft tokens], each position's logits verify the draft after it.
  int num_logits = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual KvGeometry kv_geometry() const = 0;
  // Bytes of K/V storage one block of `block_size` tokens takes (all layers).
  virtual size_t kv_bytes_per_block(int block_size) const = 0;
  // Called once by the engine before the first execute().
  virtual void allocate_kv(int num_blocks, int block_size) = 0;
  virtual int vocab_size() const = 0;
  // Longest sequence (prompt + generated tokens) the model supports.
  virtual int max_context() const = 0;

  // One batched forward over every chunk: writes K/V for each chunk's tokens into
  // its blocks, and the logits of the last num_logits positions of each chunk
  // (chunks in batch order, positions in order) into `logits` (resized to
  // sum(num_logits) x vocab_size). Batch invariance: a row's logits depend only on
  // its sequence's tokens up to that position, not on the batch or the chunking.
  // Throws distllm::Error on failure; the engine then fails that batch's requests.
  virtual void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) = 0;

  // KV transfer (prefill/decode disaggregation): copies one physical block's K/V
  // out of / into the storage, kv_bytes_per_block(block_size) bytes laid out as the
  // wire format's block payload (kv_transfer/wire.h): for each layer, K then V, each
  // [block_size][num_kv_heads] slices of kv_geometry().dtype (kv_layout.h: head_dim
  // elements, int8 followed by their f32 scale). Called on
  // the engine thread between steps. Runners without it throw distllm::Error.
  virtual void read_kv_block(int32_t block, void* out) const;
  virtual void write_kv_block(int32_t block, const void* in);
};

inline void ModelRunner::read_kv_block(int32_t, void*) const {
  throw Error("this model runner cannot export KV blocks");
}
inline void ModelRunner::write_kv_block(int32_t, const void*) {
  throw Error("this model runner cannot import KV blocks");
}

}  // namespace distllm::serve
