#include "distllm/comm/mpi_util.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/comm/backoff.h"

namespace distllm::comm {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw_error(strprintf("MPI error in %s: %.*s", what, len, text));
}

MPI_Datatype mpi_dtype(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kBF16:
    case DType::kF16: return MPI_UINT16_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU8: return MPI_UINT8_T;
    default: break;  // ProcessGroup refuses every other dtype before a backend sees it
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kProd: return MPI_PROD;
  }
  return MPI_SUM;
}

int mpi_count(size_t count, const char* what) {
  DL_CHECK(count <= static_cast<size_t>(INT_MAX), "%s: %zu elements exceed MPI's int count limit (%d)", what,
           count, INT_MAX);
  return static_cast<int>(count);
}

void mpi_wait(MPI_Request* req, const OpContext& ctx, const std::vector<int>& suspects, const char* detail) {
  Poller poll(ctx, ctx.spin_limit);
  int done = 0;
  while (true) {
    DL_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (!poll.next()) throw BackendTimeout{{}, suspects, detail};
  }
}

void mpi_wait_all(std::vector<MPI_Request>& reqs, const OpContext& ctx, const std::vector<int>& suspects,
                  const char* detail) {
  if (reqs.empty()) return;
  Poller poll(ctx, ctx.spin_limit);
  int done = 0;
  while (true) {
    DL_MPI(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (!poll.next()) throw BackendTimeout{{}, suspects, detail};
  }
}

void run_p2p(MPI_Comm comm, const Op& op, const OpContext& ctx) {
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  auto post = [&](bool send, void* data, size_t count, DType dtype, int peer, int tag) {
    MPI_Request r;
    int n = mpi_count(count, send ? "send" : "recv");
    if (send)
      DL_MPI(MPI_Isend(data, n, mpi_dtype(dtype), peer, tag, comm, &r));
    else
      DL_MPI(MPI_Irecv(data, n, mpi_dtype(dtype), peer, tag, comm, &r));
    reqs.push_back(r);
    peers.push_back(peer);
  };
  if (op.kind == OpKind::kSend) {
    post(true, const_cast<void*>(op.in), op.count, op.dtype, op.peer, op.tag);
  } else if (op.kind == OpKind::kRecv) {
    post(false, op.out, op.count, op.dtype, op.peer, op.tag);
  } else {
    for (const P2POp& p : op.p2p) post(p.kind == P2POp::Kind::kSend, p.data, p.count, p.dtype, p.peer, p.tag);
  }
  mpi_wait_all(reqs, ctx, peers, "waiting for the matching point-to-point operations");
}

std::vector<int> all_but(int size, int self) {
  std::vector<int> v;
  for (int r = 0; r < size; ++r)
    if (r != self) v.push_back(r);
  return v;
}

}  // namespace distllm::comm
