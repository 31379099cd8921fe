#include "distllm/comm/hier_backend.h"

#include "distllm/base/error.h"
#include "distllm/comm/mpi_util.h"
#include "distllm/comm/reduce.h"

namespace distllm::comm {
namespace {

std::vector<int> group_ranks_of(MPI_Comm sub, int group_rank) {
  int n = 0;
  DL_MPI(MPI_Comm_size(sub, &n));
  std::vector<int> out(static_cast<size_t>(n));
  DL_MPI(MPI_Allgather(&group_rank, 1, MPI_INT, out.data(), 1, MPI_INT, sub));
  return out;
}

// Runs one level and renames the ranks in a timeout from the level's numbering to
// the group's.
template <typename Fn>
void level(const std::vector<int>& to_group, const char* what, Fn&& fn) {
  try {
    fn();
  } catch (BackendTimeout& t) {
    for (auto& [r, key] : t.behind) r = to_group[static_cast<size_t>(r)];
    for (int& r : t.ask) r = to_group[static_cast<size_t>(r)];
    t.detail = std::string(what) + " (" + t.detail + ")";
    throw;
  }
}

}  // namespace

HierBackend::HierBackend(MPI_Comm group, MPI_Comm local, MPI_Comm inter, bool uniform_hosts, size_t chunk_bytes)
    : uniform_(uniform_hosts), local_(local, chunk_bytes), inter_(inter), full_(group) {
  DL_MPI(MPI_Comm_rank(group, &rank_));
  DL_MPI(MPI_Comm_size(group, &size_));
  DL_MPI(MPI_Comm_rank(local, &local_rank_));
  DL_MPI(MPI_Comm_size(local, &local_size_));
  local_to_group_ = group_ranks_of(local, rank_);
  inter_to_group_ = group_ranks_of(inter, rank_);
}

void HierBackend::run(const Op& op, const OpContext& ctx) {
  if (op.kind == OpKind::kAllreduce) return allreduce(op, ctx);
  full_.run(op, ctx);
}

void HierBackend::allreduce(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), N = op.count;
  if (N == 0) return;
  const size_t L = static_cast<size_t>(local_size_), me = static_cast<size_t>(local_rank_);
  const bool half = op.dtype == DType::kBF16 || op.dtype == DType::kF16;
  // kAvg: sum at every level, divide once by the group size at the end.
  const ReduceOp level_op = op.reduce == ReduceOp::kAvg ? ReduceOp::kSum : op.reduce;
  std::vector<size_t> counts(L, 0);
  if (uniform_) {
    for (size_t l = 0; l < L; ++l) counts[l] = N * (l + 1) / L - N * l / L;
  } else {
    counts[0] = N;
  }
  const size_t displ = displacements(counts)[me], mine = counts[me];
  auto* out = static_cast<uint8_t*>(op.out);
  uint8_t* piece = out + displ * es;
  if (half) wide_.resize(mine);

  OpContext c = ctx;
  auto enter = [&](unsigned phase) {
    c.phase = phase;
    if (ctx.status) ctx.status->entered.store(status_key(ctx.seq, phase));
  };
  // 1. Reduce-scatter inside the host (f32 partial sums for bf16/f16).
  enter(1);
  Op rs;
  rs.kind = OpKind::kReduceScatterV;
  rs.dtype = op.dtype;
  rs.reduce = level_op;
  rs.in = op.in;
  rs.out = half ? static_cast<void*>(wide_.data()) : static_cast<void*>(piece);
  rs.counts = counts;
  rs.widen_out_f32 = half;
  level(local_to_group_, "in-host reduce-scatter", [&] { local_.run(rs, c); });
  // 2. All-reduce this piece across hosts, then apply kAvg and round bf16/f16 once.
  enter(2);
  if (mine > 0) {
    const DType wire = half ? DType::kF32 : op.dtype;
    void* buf = half ? static_cast<void*>(wide_.data()) : static_cast<void*>(piece);
    level(inter_to_group_, "inter-host all-reduce",
          [&] { inter_.allreduce(buf, buf, mine, wire, level_op, 1, c, "MPI_Iallreduce"); });
    if (half) {
      narrow_from_f32(wide_.data(), op.dtype, piece, mine, op.reduce == ReduceOp::kAvg ? size_ : 1);
    } else if (op.reduce == ReduceOp::kAvg) {
      divide_in_place(piece, mine, op.dtype, size_);
    }
  }
  // 3. All-gather inside the host.
  enter(3);
  Op ag;
  ag.kind = OpKind::kAllgatherv;
  ag.dtype = op.dtype;
  ag.in = piece;
  ag.out = out;
  ag.counts = counts;
  level(local_to_group_, "in-host all-gather", [&] { local_.run(ag, c); });
}

}  // namespace distllm::comm
