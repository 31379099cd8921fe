// Internal: the state behind a ProcessGroup, and how groups are built (world.cpp).
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distllm/comm/backend.h"
#include "distllm/comm/process_group.h"

namespace distllm::comm {

struct Pending;

struct ProcessGroup::Impl {
  // Identity and settings.
  std::string name;
  uint64_t id = 0;
  int rank = 0, size = 1, hosts = 1;
  std::vector<int> world_ranks;
  GroupOptions options;  // resolved; children inherit them
  double timeout_s = 600;
  bool debug = false;
  int spin_limit = 512;
  std::string shm_name;

  // MPI communicators this group owns (the group's, plus per-level ones). Freed at
  // shutdown unless the group failed (a pending request may still reference them).
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Comm> extra_comms;
  std::unique_ptr<Backend> backend;
  std::shared_ptr<GroupStatus> status;

  // Execution: one queue, run in order by the worker thread (async) or the calling
  // thread (blocking). `busy` marks the single operation running at any moment.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Pending>> queue;
  bool busy = false, stop = false, shut = false;
  std::thread worker;
  uint64_t coll_seq = 0, p2p_seq = 0, splits = 0;
  std::atomic<bool> failed{false};
  std::string failure;  // guarded by mu
  WorkPtr done_work;    // returned by successful blocking calls

  ~Impl();
  WorkPtr submit(Op&& op, const CallOptions& o);
  // background: run by the communication thread while the caller computes.
  void execute(const Op& op, uint64_t seq, double timeout, bool background = false);
  void worker_loop();
  void debug_check(const Op& op, const OpContext& ctx);
  [[noreturn]] void raise_timeout(const Op& op, const OpContext& ctx, const BackendTimeout& t);
  void mark_failed(const std::string& why);
  void validate(const Op& op) const;
  std::string describe(OpKind kind, uint64_t seq) const;
  // Runs fn with the execution slot held (after every queued operation).
  template <typename Fn>
  void exclusive(Fn&& fn);
};

// Builds a group over `comm` (which it takes ownership of). Collective over comm.
std::shared_ptr<ProcessGroup> create_group(MPI_Comm comm, const GroupOptions& options, const std::string& name,
                                           uint64_t id);
// Fills unset options from the environment and checks them.
GroupOptions resolve_options(const GroupOptions& options);
void register_group(const std::shared_ptr<ProcessGroup>& group);

}  // namespace distllm::comm
