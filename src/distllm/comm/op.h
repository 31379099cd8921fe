// One communication request as the front end hands it to a backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distllm/comm/types.h"

namespace distllm::comm {

enum class OpKind : uint8_t {
  kAllreduce, kBroadcast, kReduce, kAllgather, kAllgatherv, kGather, kScatter, kReduceScatter,
  kReduceScatterV, kAlltoall, kAlltoallv, kBarrier, kSend, kRecv, kBatchP2P, kSplit,
};
const char* op_kind_name(OpKind kind);
inline bool is_p2p(OpKind k) { return k == OpKind::kSend || k == OpKind::kRecv || k == OpKind::kBatchP2P; }
inline bool reduces(OpKind k) {
  return k == OpKind::kAllreduce || k == OpKind::kReduce || k == OpKind::kReduceScatter ||
         k == OpKind::kReduceScatterV;
}
inline bool rooted(OpKind k) {
  return k == OpKind::kBroadcast || k == OpKind::kReduce || k == OpKind::kGather || k == OpKind::kScatter;
}

// A send or receive inside batch_p2p() (PyTorch's batch_isend_irecv).
struct P2POp {
  enum class Kind : uint8_t { kSend, kRecv };
  Kind kind;
  void* data;  // read for sends, written for receives
  size_t count;
  DType dtype;
  int peer;
  int tag = 0;
};

struct Op {
  OpKind kind = OpKind::kBarrier;
  DType dtype = DType::kU8;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  const void* in = nullptr;
  void* out = nullptr;
  // Elements: per rank for allreduce/broadcast/reduce; per block (one rank's share)
  // for allgather, gather, scatter, reduce_scatter, alltoall; the message for p2p.
  size_t count = 0;
  // Per-rank element counts, packed in rank order: allgatherv and reduce_scatter_v
  // (everyone's share), alltoallv (what this rank sends to each rank).
  std::vector<size_t> counts;
  std::vector<size_t> recv_counts;  // alltoallv: what this rank receives from each rank
  int peer = -1, tag = 0;           // send / recv
  std::vector<P2POp> p2p;           // batch
  // Internal (hierarchical backend): reduce_scatter_v of bf16/f16 writes f32 sums.
  bool widen_out_f32 = false;
};

// Exclusive prefix sums of counts (element displacements of packed blocks).
std::vector<size_t> displacements(const std::vector<size_t>& counts);

}  // namespace distllm::comm
