#include "distllm/comm/mpi_backend.h"

#include <cstring>
#include <numeric>

#include "distllm/base/error.h"
#include "distllm/comm/mpi_util.h"
#include "distllm/comm/reduce.h"

namespace distllm::comm {
namespace {

bool is_half(DType t) { return t == DType::kBF16 || t == DType::kF16; }

std::vector<int> to_int(const std::vector<size_t>& v, const char* what) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = mpi_count(v[i], what);
  return out;
}

std::vector<int> int_displs(const std::vector<size_t>& counts, const char* what) {
  std::vector<size_t> d = displacements(counts);
  return to_int(d, what);
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm) : comm_(comm) {
  DL_MPI(MPI_Comm_rank(comm, &rank_));
  DL_MPI(MPI_Comm_size(comm, &size_));
  others_ = all_but(size_, rank_);
}

void MpiBackend::wait(MPI_Request* req, const OpContext& ctx, const char* detail) {
  mpi_wait(req, ctx, others_, detail);
}

void MpiBackend::allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int div,
                           const OpContext& ctx, const char* detail) {
  if (count == 0) return;
  int n = mpi_count(count, "allreduce");
  MPI_Request req;
  if (is_half(dtype)) {
    wide_in_.resize(count);
    widen_to_f32(in, dtype, wide_in_.data(), count);
    DL_MPI(MPI_Iallreduce(MPI_IN_PLACE, wide_in_.data(), n, MPI_FLOAT, mpi_op(op), comm_, &req));
    wait(&req, ctx, detail);
    narrow_from_f32(wide_in_.data(), dtype, out, count, op == ReduceOp::kAvg ? div : 1);
    return;
  }
  DL_MPI(MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, mpi_dtype(dtype), mpi_op(op), comm_, &req));
  wait(&req, ctx, detail);
  if (op == ReduceOp::kAvg) divide_in_place(out, count, dtype, div);
}

void MpiBackend::reduce(const Op& op, const OpContext& ctx) {
  size_t count = op.count;
  int n = mpi_count(count, "reduce");
  bool root = rank_ == op.root;
  MPI_Request req;
  if (is_half(op.dtype)) {
    wide_in_.resize(count);
    widen_to_f32(op.in, op.dtype, wide_in_.data(), count);
    if (root) wide_out_.resize(count);
    DL_MPI(MPI_Ireduce(wide_in_.data(), root ? wide_out_.data() : nullptr, n, MPI_FLOAT, mpi_op(op.reduce), op.root,
                       comm_, &req));
    wait(&req, ctx, "MPI_Ireduce");
    if (root) narrow_from_f32(wide_out_.data(), op.dtype, op.out, count, op.reduce == ReduceOp::kAvg ? size_ : 1);
    return;
  }
  const void* send = (root && op.in == op.out) ? MPI_IN_PLACE : op.in;
  DL_MPI(MPI_Ireduce(send, root ? op.out : nullptr, n, mpi_dtype(op.dtype), mpi_op(op.reduce), op.root, comm_, &req));
  wait(&req, ctx, "MPI_Ireduce");
  if (root && op.reduce == ReduceOp::kAvg) divide_in_place(op.out, count, op.dtype, size_);
}

void MpiBackend::reduce_scatter(const Op& op, const OpContext& ctx) {
  std::vector<size_t> counts = op.kind == OpKind::kReduceScatter ? std::vector<size_t>(size_, op.count) : op.counts;
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  size_t mine = counts[rank_];
  std::vector<int> icounts = to_int(counts, "reduce_scatter");
  mpi_count(total, "reduce_scatter");
  size_t es = dtype_size(op.dtype);
  MPI_Request req;
  if (is_half(op.dtype)) {
    wide_in_.resize(total);
    widen_to_f32(op.in, op.dtype, wide_in_.data(), total);
    wide_out_.resize(mine);
    DL_MPI(MPI_Ireduce_scatter(wide_in_.data(), wide_out_.data(), icounts.data(), MPI_FLOAT, mpi_op(op.reduce), comm_,
                               &req));
    wait(&req, ctx, "MPI_Ireduce_scatter");
    if (op.widen_out_f32) {
      if (mine > 0) std::memcpy(op.out, wide_out_.data(), mine * sizeof(float));
    } else {
      narrow_from_f32(wide_out_.data(), op.dtype, op.out, mine, op.reduce == ReduceOp::kAvg ? size_ : 1);
    }
    return;
  }
  // MPI forbids overlapping send and receive buffers; our in-place form has the
  // output inside the input, so receive into scratch and copy.
  void* recv = op.out;
  size_t displ = displacements(counts)[rank_];
  bool in_place = static_cast<const uint8_t*>(op.in) + displ * es == op.out;
  if (in_place) {
    bytes_.resize(mine * es);
    recv = bytes_.data();
  }
  DL_MPI(MPI_Ireduce_scatter(op.in, recv, icounts.data(), mpi_dtype(op.dtype), mpi_op(op.reduce), comm_, &req));
  wait(&req, ctx, "MPI_Ireduce_scatter");
  if (in_place && mine > 0) std::memcpy(op.out, recv, mine * es);  // an empty share has no scratch (nullptr)
  if (op.reduce == ReduceOp::kAvg) divide_in_place(op.out, mine, op.dtype, size_);
}

void MpiBackend::run(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype);
  MPI_Request req;
  switch (op.kind) {
    case OpKind::kAllreduce:
      allreduce(op.in, op.out, op.count, op.dtype, op.reduce, size_, ctx, "MPI_Iallreduce");
      return;
    case OpKind::kBroadcast: {
      if (op.count == 0) return;
      if (rank_ == op.root && op.in != op.out) std::memcpy(op.out, op.in, op.count * es);
      DL_MPI(MPI_Ibcast(op.out, mpi_count(op.count, "broadcast"), mpi_dtype(op.dtype), op.root, comm_, &req));
      wait(&req, ctx, "MPI_Ibcast");
      return;
    }
    case OpKind::kReduce:
      if (op.count == 0) return;
      reduce(op, ctx);
      return;
    case OpKind::kAllgather:
    case OpKind::kAllgatherv: {
      std::vector<size_t> counts = op.kind == OpKind::kAllgather ? std::vector<size_t>(size_, op.count) : op.counts;
      std::vector<size_t> displs = displacements(counts);
      if (displs.back() + counts.back() == 0) return;
      std::vector<int> ic = to_int(counts, "allgather"), id = int_displs(counts, "allgather");
      bool in_place = op.in == static_cast<uint8_t*>(op.out) + displs[rank_] * es;
      DL_MPI(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : op.in, ic[rank_], mpi_dtype(op.dtype), op.out, ic.data(),
                             id.data(), mpi_dtype(op.dtype), comm_, &req));
      wait(&req, ctx, "MPI_Iallgatherv");
      return;
    }
    case OpKind::kGather: {
      if (op.count == 0) return;
      int n = mpi_count(op.count * size_, "gather");
      (void)n;
      bool root = rank_ == op.root;
      bool in_place = root && op.in == static_cast<uint8_t*>(op.out) + op.root * op.count * es;
      DL_MPI(MPI_Igather(in_place ? MPI_IN_PLACE : op.in, static_cast<int>(op.count), mpi_dtype(op.dtype),
                         root ? op.out : nullptr, static_cast<int>(op.count), mpi_dtype(op.dtype), op.root, comm_,
                         &req));
      wait(&req, ctx, "MPI_Igather");
      return;
    }
    case OpKind::kScatter: {
      if (op.count == 0) return;
      mpi_count(op.count * size_, "scatter");
      bool root = rank_ == op.root;
      bool in_place = root && op.out == static_cast<const uint8_t*>(op.in) + op.root * op.count * es;
      DL_MPI(MPI_Iscatter(root ? op.in : nullptr, static_cast<int>(op.count), mpi_dtype(op.dtype),
                          in_place ? MPI_IN_PLACE : op.out, static_cast<int>(op.count), mpi_dtype(op.dtype), op.root,
                          comm_, &req));
      wait(&req, ctx, "MPI_Iscatter");
      return;
    }
    case OpKind::kReduceScatter:
    case OpKind::kReduceScatterV: {
      size_t total = op.kind == OpKind::kReduceScatter ? op.count * size_
                                                       : std::accumulate(op.counts.begin(), op.counts.end(), size_t{0});
      if (total == 0) return;
      reduce_scatter(op, ctx);
      return;
    }
    case OpKind::kAlltoall:
    case OpKind::kAlltoallv: {
      std::vector<size_t> sc = op.kind == OpKind::kAlltoall ? std::vector<size_t>(size_, op.count) : op.counts;
      std::vector<size_t> rc = op.kind == OpKind::kAlltoall ? sc : op.recv_counts;
      std::vector<int> isc = to_int(sc, "alltoall"), isd = int_displs(sc, "alltoall");
      std::vector<int> irc = to_int(rc, "alltoall"), ird = int_displs(rc, "alltoall");
      bool in_place = op.in == op.out;  // only allowed for equal blocks (checked by the front end)
      DL_MPI(MPI_Ialltoallv(in_place ? MPI_IN_PLACE : op.in, isc.data(), isd.data(), mpi_dtype(op.dtype), op.out,
                            irc.data(), ird.data(), mpi_dtype(op.dtype), comm_, &req));
      wait(&req, ctx, "MPI_Ialltoallv");
      return;
    }
    case OpKind::kBarrier:
      DL_MPI(MPI_Ibarrier(comm_, &req));
      wait(&req, ctx, "MPI_Ibarrier");
      return;
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kBatchP2P:
      run_p2p(comm_, op, ctx);
      return;
    case OpKind::kSplit:
      break;
  }
  DL_ASSERT(false);
}

}  // namespace distllm::comm
