// ProcessGroup: the c10d-style communication API.
//
//   auto world = comm::init_process_group();            // under mpirun or srun
//   world->allreduce(grad, n, DType::kF32, ReduceOp::kAvg);          // blocking
//   auto w = world->allreduce(bucket, m, DType::kF32, ReduceOp::kSum,
//                             {.async_op = true});                    // overlapped
//   ... compute ...
//   w->wait();
//
// Buffers are raw pointers plus an element count and a dtype (DType). Counts are
// elements, never bytes. In-place forms follow NCCL: allreduce/broadcast/reduce
// with in == out; allgather with in == out + rank*count; reduce_scatter with
// out == in + rank*count (and the same with displacements for the v variants).
//
// Every rank of the group must issue the group's collectives in the same order.
// Operations run in issue order; with async_op they run on the group's
// communication thread while the caller continues, and complete in issue order.
// A blocking call (async_op = false, the default) runs on the caller's thread after
// the queued ones, throws on failure, and returns an already-completed Work.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "distllm/comm/op.h"
#include "distllm/comm/options.h"
#include "distllm/comm/types.h"
#include "distllm/comm/work.h"

namespace distllm::comm {

struct CallOptions {
  bool async_op = false;
  // Deadline for this call; zero means the group's default (GroupOptions::timeout_s).
  std::chrono::duration<double> timeout{0};
};

class ProcessGroup {
 public:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;
  std::string backend_name() const;        // "mpi", "shm" or "hierarchical"
  const std::vector<int>& world_ranks() const;  // group rank -> world rank
  // The resolved options (backend as requested, e.g. "auto"); children inherit them.
  const GroupOptions& options() const;
  double timeout_s() const;
  bool debug() const;
  // Number of hosts spanned (as the backend sees them; test_only_ranks_per_host counts).
  int num_hosts() const;
  // True once an operation failed (timeout, MPI error); later calls throw.
  bool failed() const;
  std::string failure() const;
  // /dev/shm name the shared-memory backend used while bootstrapping ("" otherwise).
  std::string shm_segment_name() const;

  // ---- collectives ----
  WorkPtr allreduce(void* data, size_t count, DType dtype, ReduceOp op = ReduceOp::kSum, const CallOptions& o = {});
  WorkPtr allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op = ReduceOp::kSum,
                    const CallOptions& o = {});
  WorkPtr broadcast(void* data, size_t count, DType dtype, int root, const CallOptions& o = {});
  // `in` is read on the root only; every rank receives into `out`.
  WorkPtr broadcast(const void* in, void* out, size_t count, DType dtype, int root, const CallOptions& o = {});
  // `out` is written on the root only (may be null elsewhere).
  WorkPtr reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                 const CallOptions& o = {});
  // out: size() * count elements, rank r's block at r * count.
  WorkPtr allgather(const void* in, void* out, size_t count, DType dtype, const CallOptions& o = {});
  // counts[r] elements from rank r, packed in rank order in out; in has counts[rank()].
  WorkPtr allgatherv(const void* in, void* out, std::span<const size_t> counts, DType dtype,
                     const CallOptions& o = {});
  // out (root only): size() * count elements.
  WorkPtr gather(const void* in, void* out, size_t count, DType dtype, int root, const CallOptions& o = {});
  // in (root only): size() * count elements; each rank receives its block in out.
  WorkPtr scatter(const void* in, void* out, size_t count, DType dtype, int root, const CallOptions& o = {});
  // in: size() * count elements; out: this rank's reduced block of count elements.
  WorkPtr reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op = ReduceOp::kSum,
                         const CallOptions& o = {});
  // in: sum(counts) elements; out: counts[rank()] elements.
  WorkPtr reduce_scatter_v(const void* in, void* out, std::span<const size_t> counts, DType dtype,
                           ReduceOp op = ReduceOp::kSum, const CallOptions& o = {});
  // Block r of in (count elements) goes to rank r; block r of out comes from rank r.
  // in == out is allowed.
  WorkPtr alltoall(const void* in, void* out, size_t count, DType dtype, const CallOptions& o = {});
  // send_counts[r] elements go to rank r, recv_counts[r] come from rank r, packed in
  // rank order. in and out must not overlap.
  WorkPtr alltoallv(const void* in, std::span<const size_t> send_counts, void* out,
                    std::span<const size_t> recv_counts, DType dtype, const CallOptions& o = {});
  WorkPtr barrier(const CallOptions& o = {});

  // ---- point to point (MPI underneath in every backend) ----
  // A send may not complete until the matching receive is posted: two ranks that
  // exchange data must use batch_p2p (or opposite orders), as with MPI_Send.
  WorkPtr send(const void* data, size_t count, DType dtype, int dst, int tag = 0, const CallOptions& o = {});
  WorkPtr recv(void* data, size_t count, DType dtype, int src, int tag = 0, const CallOptions& o = {});
  // Posts all sends and receives at once and completes when all have (PyTorch's
  // batch_isend_irecv).
  WorkPtr batch_p2p(std::span<const P2POp> ops, const CallOptions& o = {});

  // Typed conveniences.
  template <typename T>
  WorkPtr allreduce(std::span<T> data, ReduceOp op = ReduceOp::kSum, const CallOptions& o = {}) {
    return allreduce(data.data(), data.size(), dtype_of<std::remove_const_t<T>>(), op, o);
  }
  template <typename T>
  WorkPtr broadcast(std::span<T> data, int root, const CallOptions& o = {}) {
    return broadcast(data.data(), data.size(), dtype_of<std::remove_const_t<T>>(), root, o);
  }

  // ---- subgroups ----
  // Collective over this group (like MPI_Comm_split): ranks passing the same color
  // form a new group, ordered by (key, rank). A negative color returns nullptr.
  // The child inherits this group's options unless `options` is given.
  std::shared_ptr<ProcessGroup> split(int color, int key);
  std::shared_ptr<ProcessGroup> split(int color, int key, const GroupOptions& options);

  // Runs the queued operations, stops the communication thread and releases the
  // backend. Called by the destructor and by finalize(); later calls throw.
  void shutdown();

 private:
  std::unique_ptr<Impl> impl_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace distllm::comm
