// The ProcessGroup front end: argument checks, ordering and the communication
// thread (failure reports and debug checks: group_failures.cpp). Backends only move data.
#include "distllm/comm/process_group.h"

#include <algorithm>
#include <numeric>

#include "distllm/base/error.h"
#include "distllm/base/peer_wait.h"
#include "distllm/base/log.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/comm/diag.h"
#include "distllm/comm/errors.h"
#include "distllm/comm/group_internal.h"
#include "distllm/comm/mpi_util.h"

namespace distllm::comm {

struct SplitResult {
  MPI_Comm comm = MPI_COMM_NULL;
  uint64_t seq = 0;
};

struct Pending {
  Op op;
  uint64_t seq = 0;
  double timeout = 0;
  WorkPtr work;
  bool inline_call = false;
};

// ---------------------------------------------------------------------------
// Impl

ProcessGroup::Impl::~Impl() = default;

std::string ProcessGroup::Impl::describe(OpKind kind, uint64_t seq) const {
  return strprintf("%s #%llu on group '%s'", op_kind_name(kind), static_cast<unsigned long long>(seq), name.c_str());
}

void ProcessGroup::Impl::mark_failed(const std::string& why) {
  std::lock_guard lk(mu);
  if (!failed.load()) failure = why;
  failed.store(true);
}

void ProcessGroup::Impl::validate(const Op& op) const {
  const char* what = op_kind_name(op.kind);
  auto need = [&](const void* p, size_t count, const char* arg) {
    DL_CHECK(p != nullptr || count == 0, "%s on group '%s': %s is null but the count is %zu", what, name.c_str(), arg,
             count);
  };
  if (op.kind != OpKind::kBarrier && op.kind != OpKind::kSplit)
    DL_CHECK(is_collective_dtype(op.dtype), "%s on group '%s': collectives do not support dtype %s", what, name.c_str(),
             dtype_short_name(op.dtype));
  if (rooted(op.kind))
    DL_CHECK(op.root >= 0 && op.root < size, "%s on group '%s': root %d is outside [0, %d)", what, name.c_str(),
             op.root, size);
  const size_t n = static_cast<size_t>(size), me = static_cast<size_t>(rank);
  switch (op.kind) {
    case OpKind::kAllreduce:
      need(op.in, op.count, "input");
      need(op.out, op.count, "output");
      break;
    case OpKind::kBroadcast:
      if (rank == op.root) need(op.in, op.count, "input");
      need(op.out, op.count, "output");
      break;
    case OpKind::kReduce:
      need(op.in, op.count, "input");
      if (rank == op.root) need(op.out, op.count, "output");
      break;
    case OpKind::kAllgather:
    case OpKind::kReduceScatter:
    case OpKind::kAlltoall:
      need(op.in, op.count, "input");
      need(op.out, op.count, "output");
      break;
    case OpKind::kGather:
      need(op.in, op.count, "input");
      if (rank == op.root) need(op.out, op.count, "output");
      break;
    case OpKind::kScatter:
      if (rank == op.root) need(op.in, op.count, "input");
      need(op.out, op.count, "output");
      break;
    case OpKind::kAllgatherv:
    case OpKind::kReduceScatterV: {
      DL_CHECK(op.counts.size() == n, "%s on group '%s': counts has %zu entries, the group has %d ranks", what,
               name.c_str(), op.counts.size(), size);
      size_t total = std::accumulate(op.counts.begin(), op.counts.end(), size_t{0});
      need(op.in, op.kind == OpKind::kAllgatherv ? op.counts[me] : total, "input");
      need(op.out, op.kind == OpKind::kAllgatherv ? total : op.counts[me], "output");
      break;
    }
    case OpKind::kAlltoallv: {
      DL_CHECK(op.counts.size() == n && op.recv_counts.size() == n,
               "%s on group '%s': send_counts and recv_counts need %d entries each (got %zu and %zu)", what,
               name.c_str(), size, op.counts.size(), op.recv_counts.size());
      size_t sent = std::accumulate(op.counts.begin(), op.counts.end(), size_t{0});
      size_t got = std::accumulate(op.recv_counts.begin(), op.recv_counts.end(), size_t{0});
      need(op.in, sent, "input");
      need(op.out, got, "output");
      DL_CHECK(op.in != op.out || (sent == 0 && got == 0),
               "%s on group '%s': in-place alltoallv is not supported (in and out must differ)", what, name.c_str());
      DL_CHECK(op.counts[me] == op.recv_counts[me],
               "%s on group '%s': rank %d sends %zu elements to itself but expects %zu", what, name.c_str(), rank,
               op.counts[me], op.recv_counts[me]);
      break;
    }
    case OpKind::kSend:
    case OpKind::kRecv:
      DL_CHECK(op.peer >= 0 && op.peer < size && op.peer != rank,
               "%s on group '%s': peer %d must be another rank in [0, %d)", what, name.c_str(), op.peer, size);
      DL_CHECK(op.tag >= 0 && op.tag <= 32767, "%s on group '%s': tag %d is outside [0, 32767]", what,
               name.c_str(), op.tag);
      need(op.kind == OpKind::kSend ? op.in : op.out, op.count, "data");
      break;
    case OpKind::kBatchP2P:
      for (const P2POp& p : op.p2p) {
        DL_CHECK(p.peer >= 0 && p.peer < size, "batch_p2p on group '%s': peer %d is outside [0, %d)", name.c_str(),
                 p.peer, size);
        DL_CHECK(p.tag >= 0 && p.tag <= 32767, "batch_p2p on group '%s': tag %d is outside [0, 32767]",
                 name.c_str(), p.tag);
        need(p.data, p.count, "data");
      }
      break;
    case OpKind::kBarrier:
    case OpKind::kSplit:
      break;
  }
}

WorkPtr ProcessGroup::Impl::submit(Op&& op, const CallOptions& o) {
  validate(op);
  DL_CHECK(o.timeout.count() >= 0, "%s on group '%s': negative timeout", op_kind_name(op.kind), name.c_str());
  const double timeout = o.timeout.count() > 0 ? o.timeout.count() : timeout_s;
  std::unique_lock lk(mu);
  DL_CHECK(!shut && !stop, "%s on group '%s': the group was shut down", op_kind_name(op.kind), name.c_str());
  if (failed.load())
    throw CommError(strprintf("%s on group '%s' refused: the group failed earlier: %s", op_kind_name(op.kind),
                              name.c_str(), failure.c_str()));
  const uint64_t seq = is_p2p(op.kind) ? ++p2p_seq : ++coll_seq;
  if (o.async_op) {
    auto p = std::make_shared<Pending>();
    p->op = std::move(op);
    p->seq = seq;
    p->timeout = timeout;
    p->work = std::make_shared<Work>(p->op.kind, seq, name);
    WorkPtr work = p->work;
    queue.push_back(std::move(p));
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
    lk.unlock();
    cv.notify_all();
    return work;
  }
  PeerWait waiting;  // a blocking call waits on its peers until it returns
  if (!queue.empty() || busy) {
    // Queued asynchronous operations were issued first: run after them.
    auto p = std::make_shared<Pending>();
    p->inline_call = true;
    queue.push_back(p);
    cv.wait(lk, [&] { return queue.front() == p && !busy; });
    queue.pop_front();
  }
  busy = true;
  lk.unlock();
  struct Release {
    Impl* self;
    ~Release() {
      {
        std::lock_guard g(self->mu);
        self->busy = false;
      }
      self->cv.notify_all();
    }
  } release{this};
  execute(op, seq, timeout);
  return done_work;
}

void ProcessGroup::Impl::worker_loop() {
  std::unique_lock lk(mu);
  while (true) {
    cv.wait(lk, [&] { return (stop && queue.empty()) || (!queue.empty() && !busy && !queue.front()->inline_call); });
    if (queue.empty()) return;
    std::shared_ptr<Pending> p = queue.front();
    queue.pop_front();
    busy = true;
    lk.unlock();
    std::exception_ptr error;
    p->work->mark_started();
    try {
      execute(p->op, p->seq, p->timeout, /*background=*/true);
    } catch (...) {
      error = std::current_exception();
    }
    // Mark the work done before releasing the slot, so that anything issued later
    // (which may run as soon as the slot is free) completes after it.
    p->work->finish(error);
    lk.lock();
    busy = false;
    cv.notify_all();
  }
}

void ProcessGroup::Impl::execute(const Op& op, uint64_t seq, double timeout, bool background) {
  if (failed.load()) {
    std::lock_guard lk(mu);
    throw CommError(strprintf("%s refused: the group failed earlier: %s", describe(op.kind, seq).c_str(),
                              failure.c_str()));
  }
  OpContext ctx;
  ctx.seq = seq;
  ctx.timeout_s = timeout;
  ctx.status = status.get();
  ctx.spin_limit = spin_limit;
  // An overlapped operation shares the cores with the caller's computation: waiting
  // for a peer must not burn them (the peer is probably computing too).
  ctx.background = background;
  const bool collective = !is_p2p(op.kind);
  if (collective) {
    // Release stores (plain moves on x86): only the status service reads these.
    status->kind.store(static_cast<int>(op.kind), std::memory_order_release);
    status->entered.store(status_key(seq, 0), std::memory_order_release);
  }
  try {
    if (debug && collective) debug_check(op, ctx);
    if (op.kind == OpKind::kSplit) {
      // Rendezvous with a deadline first, so a missing rank is reported instead of
      // hanging inside MPI_Comm_split.
      std::vector<uint8_t> all(static_cast<size_t>(size));
      uint8_t one = 1;
      Op ag;
      ag.kind = OpKind::kAllgather;
      ag.in = &one;
      ag.out = all.data();
      ag.count = 1;
      backend->run(ag, ctx);
      const int* ck = static_cast<const int*>(op.in);
      auto* result = static_cast<SplitResult*>(op.out);
      DL_MPI(MPI_Comm_split(comm, ck[0] < 0 ? MPI_UNDEFINED : ck[0], ck[1], &result->comm));
      result->seq = seq;
    } else {
      backend->run(op, ctx);
    }
  } catch (const BackendTimeout& t) {
    raise_timeout(op, ctx, t);
  } catch (const CommError&) {
    throw;
  } catch (const Error& e) {
    std::string msg = describe(op.kind, seq) + " failed: " + e.what();
    mark_failed(msg);
    throw CommError(msg);
  }
  if (collective) status->completed.store(seq, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// ProcessGroup

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    LOG_WARN("shutting down group '%s': %s", impl_->name.c_str(), e.what());
  }
}

int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return impl_->size; }
const std::string& ProcessGroup::name() const { return impl_->name; }
std::string ProcessGroup::backend_name() const { return impl_->backend ? impl_->backend->name() : "none"; }
const std::vector<int>& ProcessGroup::world_ranks() const { return impl_->world_ranks; }
const GroupOptions& ProcessGroup::options() const { return impl_->options; }
double ProcessGroup::timeout_s() const { return impl_->timeout_s; }
bool ProcessGroup::debug() const { return impl_->debug; }
int ProcessGroup::num_hosts() const { return impl_->hosts; }
bool ProcessGroup::failed() const { return impl_->failed.load(); }
std::string ProcessGroup::failure() const {
  std::lock_guard lk(impl_->mu);
  return impl_->failure;
}
std::string ProcessGroup::shm_segment_name() const { return impl_->shm_name; }

namespace {
Op make(OpKind kind, const void* in, void* out, size_t count, DType dtype) {
  Op op;
  op.kind = kind;
  op.in = in;
  op.out = out;
  op.count = count;
  op.dtype = dtype;
  return op;
}
}  // namespace

WorkPtr ProcessGroup::allreduce(void* data, size_t count, DType dtype, ReduceOp op, const CallOptions& o) {
  return allreduce(data, data, count, dtype, op, o);
}

WorkPtr ProcessGroup::allreduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                const CallOptions& o) {
  Op x = make(OpKind::kAllreduce, in, out, count, dtype);
  x.reduce = op;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::broadcast(void* data, size_t count, DType dtype, int root, const CallOptions& o) {
  return broadcast(data, data, count, dtype, root, o);
}

WorkPtr ProcessGroup::broadcast(const void* in, void* out, size_t count, DType dtype, int root,
                                const CallOptions& o) {
  Op x = make(OpKind::kBroadcast, in, out, count, dtype);
  x.root = root;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                             const CallOptions& o) {
  Op x = make(OpKind::kReduce, in, out, count, dtype);
  x.reduce = op;
  x.root = root;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::allgather(const void* in, void* out, size_t count, DType dtype, const CallOptions& o) {
  return impl_->submit(make(OpKind::kAllgather, in, out, count, dtype), o);
}

WorkPtr ProcessGroup::allgatherv(const void* in, void* out, std::span<const size_t> counts, DType dtype,
                                 const CallOptions& o) {
  Op x = make(OpKind::kAllgatherv, in, out, 0, dtype);
  x.counts.assign(counts.begin(), counts.end());
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::gather(const void* in, void* out, size_t count, DType dtype, int root, const CallOptions& o) {
  Op x = make(OpKind::kGather, in, out, count, dtype);
  x.root = root;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype, int root, const CallOptions& o) {
  Op x = make(OpKind::kScatter, in, out, count, dtype);
  x.root = root;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                     const CallOptions& o) {
  Op x = make(OpKind::kReduceScatter, in, out, count, dtype);
  x.reduce = op;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::reduce_scatter_v(const void* in, void* out, std::span<const size_t> counts, DType dtype,
                                       ReduceOp op, const CallOptions& o) {
  Op x = make(OpKind::kReduceScatterV, in, out, 0, dtype);
  x.reduce = op;
  x.counts.assign(counts.begin(), counts.end());
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype, const CallOptions& o) {
  return impl_->submit(make(OpKind::kAlltoall, in, out, count, dtype), o);
}

WorkPtr ProcessGroup::alltoallv(const void* in, std::span<const size_t> send_counts, void* out,
                                std::span<const size_t> recv_counts, DType dtype, const CallOptions& o) {
  Op x = make(OpKind::kAlltoallv, in, out, 0, dtype);
  x.counts.assign(send_counts.begin(), send_counts.end());
  x.recv_counts.assign(recv_counts.begin(), recv_counts.end());
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::barrier(const CallOptions& o) { return impl_->submit(make(OpKind::kBarrier, nullptr, nullptr, 0, DType::kU8), o); }

WorkPtr ProcessGroup::send(const void* data, size_t count, DType dtype, int dst, int tag, const CallOptions& o) {
  Op x = make(OpKind::kSend, data, nullptr, count, dtype);
  x.peer = dst;
  x.tag = tag;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::recv(void* data, size_t count, DType dtype, int src, int tag, const CallOptions& o) {
  Op x = make(OpKind::kRecv, nullptr, data, count, dtype);
  x.peer = src;
  x.tag = tag;
  return impl_->submit(std::move(x), o);
}

WorkPtr ProcessGroup::batch_p2p(std::span<const P2POp> ops, const CallOptions& o) {
  Op x;
  x.kind = OpKind::kBatchP2P;
  x.p2p.assign(ops.begin(), ops.end());
  return impl_->submit(std::move(x), o);
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  GroupOptions o = impl_->options;
  o.name.clear();
  return split(color, key, o);
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, const GroupOptions& options) {
  resolve_options(options);  // bad options fail on every rank before any communication
  int ck[2] = {color, key};
  SplitResult child;
  Op x;
  x.kind = OpKind::kSplit;
  x.in = ck;
  x.out = &child;
  impl_->submit(std::move(x), {});
  if (color < 0) return nullptr;
  const uint64_t seq = child.seq;  // the split's own number: the same on every member
  uint64_t id = mix64(impl_->id ^ mix64(seq * 0x100000001B3ull + static_cast<uint64_t>(color)));
  std::string child_name = options.name.empty() ? strprintf("%s/split%d", impl_->name.c_str(), color) : options.name;
  return create_group(child.comm, options, child_name, id);
}

void ProcessGroup::shutdown() {
  Impl& I = *impl_;
  {
    std::lock_guard lk(I.mu);
    if (I.shut || I.stop) return;
    I.stop = true;
  }
  I.cv.notify_all();
  if (I.worker.joinable()) I.worker.join();
  {
    // A blocking call on another thread may still be running (or queued).
    std::unique_lock lk(I.mu);
    I.cv.wait(lk, [&] { return !I.busy && I.queue.empty(); });
    I.shut = true;
  }
  if (I.status) diag::unregister_group(I.status->id);
  I.backend.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || I.failed.load()) return;  // a failed group's communicators may still have requests pending
  for (MPI_Comm& c : I.extra_comms) MPI_Comm_free(&c);
  if (I.comm != MPI_COMM_NULL) MPI_Comm_free(&I.comm);
}

}  // namespace distllm::comm
