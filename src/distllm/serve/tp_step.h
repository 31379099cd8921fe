// What rank 0 of `distllm serve --tp N` tells the other ranks before each model
// call: the wire format of one engine step, and its broadcast over the world group.
//
// Only the forward is distributed. The scheduler, KV block manager, prefix cache and
// sampler live on rank 0; the other ranks just need, per step, exactly what the
// model runner is handed (ModelRunner::execute's chunks: tokens, positions, block
// tables, num_logits), so that every rank runs its shard of the same batch and the
// tensor-parallel collectives inside the forward line up.
//
// A message is a broadcast of a fixed header {kind, payload words} from rank 0,
// then (when non-empty) a broadcast of the payload: int32 words.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "distllm/comm/process_group.h"
#include "distllm/serve/model_runner.h"

namespace distllm::serve {

enum class TpMessageKind : int32_t {
  kAllocateKv = 1,  // payload {num_blocks, block_size}
  kStep = 2,        // payload encode_tp_step(batch)
  kShutdown = 3,    // no payload: the workers leave their loop
};

struct TpMessage {
  TpMessageKind kind = TpMessageKind::kShutdown;
  std::vector<int32_t> payload;
};

// [chunks, then per chunk: tokens, start_pos, blocks, num_logits, its tokens, its
// block ids]. request_id stays on rank 0 (the runner never reads it).
std::vector<int32_t> encode_tp_step(const std::vector<SequenceChunk>& batch);
// Throws distllm::Error on a malformed payload (a sender bug, never user input).
std::vector<SequenceChunk> decode_tp_step(std::span<const int32_t> words);

// Rank 0: broadcasts one message to every rank of `group`.
void send_tp_message(comm::ProcessGroup& group, TpMessageKind kind, std::span<const int32_t> payload);
// Other ranks: waits for rank 0's next message. The header may take `idle_timeout_s`
// (a server idles between requests for as long as it likes); the payload, sent
// right after it, the group's own timeout.
TpMessage receive_tp_message(comm::ProcessGroup& group, double idle_timeout_s);

}  // namespace distllm::serve
