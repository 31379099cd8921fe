#include "distllm/serve/tp_step.h"

#include <chrono>

#include "distllm/base/error.h"

namespace distllm::serve {

namespace {

constexpr int kChunkFields = 4;  // tokens, start_pos, blocks, num_logits

}  // namespace

std::vector<int32_t> encode_tp_step(const std::vector<SequenceChunk>& batch) {
  size_t words = 1;
  for (const SequenceChunk& c : batch) words += kChunkFields + c.tokens.size() + c.block_table.size();
  std::vector<int32_t> out;
  out.reserve(words);
  out.push_back(static_cast<int32_t>(batch.size()));
  for (const SequenceChunk& c : batch) {
    out.push_back(static_cast<int32_t>(c.tokens.size()));
    out.push_back(c.start_pos);
    out.push_back(static_cast<int32_t>(c.block_table.size()));
    out.push_back(c.num_logits);
    out.insert(out.end(), c.tokens.begin(), c.tokens.end());
    out.insert(out.end(), c.block_table.begin(), c.block_table.end());
  }
  return out;
}

std::vector<SequenceChunk> decode_tp_step(std::span<const int32_t> words) {
  size_t at = 0;
  auto take = [&](size_t n) {
    DL_CHECK(n <= words.size() - at, "tensor-parallel step message is truncated (%zu words)", words.size());
    std::span<const int32_t> s = words.subspan(at, n);
    at += n;
    return s;
  };
  const int32_t chunks = take(1)[0];
  DL_CHECK(chunks >= 0, "tensor-parallel step message has %d chunks", chunks);
  std::vector<SequenceChunk> batch(static_cast<size_t>(chunks));
  for (SequenceChunk& c : batch) {
    std::span<const int32_t> f = take(kChunkFields);
    DL_CHECK(f[0] >= 0 && f[2] >= 0, "tensor-parallel step message has a negative length");
    c.start_pos = f[1];
    c.num_logits = f[3];
    std::span<const int32_t> tokens = take(static_cast<size_t>(f[0]));
    std::span<const int32_t> blocks = take(static_cast<size_t>(f[2]));
    c.tokens.assign(tokens.begin(), tokens.end());
    c.block_table.assign(blocks.begin(), blocks.end());
  }
  DL_CHECK(at == words.size(), "tensor-parallel step message has %zu words after its last chunk", words.size() - at);
  return batch;
}

void send_tp_message(comm::ProcessGroup& group, TpMessageKind kind, std::span<const int32_t> payload) {
  DL_CHECK(group.rank() == 0, "only rank 0 sends tensor-parallel serving messages");
  int64_t header[2] = {static_cast<int64_t>(kind), static_cast<int64_t>(payload.size())};
  group.broadcast(header, 2, DType::kI64, 0);
  // In place on the root: its buffer is only read.
  if (!payload.empty()) group.broadcast(const_cast<int32_t*>(payload.data()), payload.size(), DType::kI32, 0);
}

TpMessage receive_tp_message(comm::ProcessGroup& group, double idle_timeout_s) {
  int64_t header[2] = {0, 0};
  comm::CallOptions idle;
  idle.timeout = std::chrono::duration<double>(idle_timeout_s);
  group.broadcast(header, 2, DType::kI64, 0, idle);
  TpMessage m;
  DL_CHECK(header[0] >= static_cast<int64_t>(TpMessageKind::kAllocateKv) &&
               header[0] <= static_cast<int64_t>(TpMessageKind::kShutdown) && header[1] >= 0 && header[1] < (1ll << 31),
           "tensor-parallel serving got a bad message header {%lld, %lld}", (long long)header[0], (long long)header[1]);
  m.kind = static_cast<TpMessageKind>(header[0]);
  m.payload.resize(static_cast<size_t>(header[1]));
  if (!m.payload.empty()) group.broadcast(m.payload.data(), m.payload.size(), DType::kI32, 0);
  return m;
}

}  // namespace distllm::serve
