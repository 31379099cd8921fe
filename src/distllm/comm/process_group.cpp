// The ProcessGroup front end: argument checks, ordering, the communication thread,
// debug-mode checks and failure reports. Backends only move data.
#include "distllm/comm/process_group.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "distllm/base/error.h"
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

namespace {

bool reduces(OpKind k) {
  return k == OpKind::kAllreduce || k == OpKind::kReduce || k == OpKind::kReduceScatter ||
         k == OpKind::kReduceScatterV;
}
bool rooted(OpKind k) {
  return k == OpKind::kBroadcast || k == OpKind::kReduce || k == OpKind::kGather || k == OpKind::kScatter;
}

uint64_t hash_counts(const std::vector<size_t>& v) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (size_t x : v) h = mix64(h ^ x);
  return h;
}

std::string rank_list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += strprintf(i ? ", %d" : "%d", v[i]);
  return s + "]";
}

// Group ranks, and in a subgroup also their world ranks: the ranks a launcher's
// log and a job's --rank flags use.
std::string rank_list(const std::vector<int>& v, const std::vector<int>& world_ranks) {
  bool identity = true;
  for (size_t r = 0; r < world_ranks.size(); ++r) identity = identity && world_ranks[r] == static_cast<int>(r);
  if (identity) return rank_list(v);
  std::vector<int> world;
  for (int r : v) world.push_back(world_ranks[static_cast<size_t>(r)]);
  return rank_list(v) + " (world " + rank_list(world) + ")";
}

// What debug mode compares across ranks; fits the shared-memory inline path.
struct Descriptor {
  uint64_t seq;
  uint64_t count;
  uint64_t counts_hash;
  uint64_t total;
  int32_t root;
  uint8_t kind, dtype, reduce, pad;
};
static_assert(sizeof(Descriptor) == 40);

Descriptor describe_args(const Op& op, uint64_t seq) {
  Descriptor d{};
  d.seq = seq;
  d.kind = static_cast<uint8_t>(op.kind);
  d.root = rooted(op.kind) ? op.root : -1;
  if (op.kind != OpKind::kBarrier && op.kind != OpKind::kSplit) d.dtype = static_cast<uint8_t>(op.dtype);
  if (reduces(op.kind)) d.reduce = static_cast<uint8_t>(op.reduce);
  if (op.kind == OpKind::kAllgatherv || op.kind == OpKind::kReduceScatterV) {
    d.counts_hash = hash_counts(op.counts);
    d.total = std::accumulate(op.counts.begin(), op.counts.end(), uint64_t{0});
  } else if (op.kind != OpKind::kAlltoallv && op.kind != OpKind::kBarrier && op.kind != OpKind::kSplit) {
    d.count = op.count;
  }
  return d;
}

std::string format_args(const Descriptor& d) {
  auto kind = static_cast<OpKind>(d.kind);
  std::string s = strprintf("%s#%llu(", op_kind_name(kind), static_cast<unsigned long long>(d.seq));
  if (kind == OpKind::kBarrier || kind == OpKind::kSplit) return s + ")";
  if (kind == OpKind::kAllgatherv || kind == OpKind::kReduceScatterV)
    s += strprintf("counts total=%llu hash=%016llx", static_cast<unsigned long long>(d.total),
                   static_cast<unsigned long long>(d.counts_hash));
  else if (kind != OpKind::kAlltoallv)
    s += strprintf("count=%llu", static_cast<unsigned long long>(d.count));
  s += strprintf("%sdtype=%s", kind == OpKind::kAlltoallv ? "" : ", ", dtype_short_name(static_cast<DType>(d.dtype)));
  if (reduces(kind)) s += strprintf(", op=%s", reduce_op_name(static_cast<ReduceOp>(d.reduce)));
  if (d.root >= 0) s += strprintf(", root=%d", d.root);
  return s + ")";
}

}  // namespace

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

void ProcessGroup::Impl::raise_timeout(const Op& op, const OpContext& ctx, const BackendTimeout& t) {
  std::string msg = strprintf("%s (%s backend, %d ranks) timed out after %.3g s", describe(op.kind, ctx.seq).c_str(),
                              backend->name(), size, ctx.timeout_s);
  std::vector<int> not_arrived;
  if (is_p2p(op.kind)) {
    std::vector<int> peers = t.ask;
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    msg += strprintf(": peers %s did not complete the matching operations (%s)", rank_list(peers, world_ranks).c_str(),
                     t.detail.c_str());
  } else {
    std::vector<std::string> notes;
    std::vector<int> stalled, silent;
    auto classify = [&](int r, uint64_t key, int kind) {
      uint64_t their_seq = key >> 2;
      if (their_seq < ctx.seq) {
        not_arrived.push_back(r);
        if (their_seq == 0)
          notes.push_back(strprintf("rank %d has not entered any collective on this group", r));
        else
          notes.push_back(strprintf("rank %d last entered #%llu%s%s", r, static_cast<unsigned long long>(their_seq),
                                    kind >= 0 ? " " : "", kind >= 0 ? op_kind_name(static_cast<OpKind>(kind)) : ""));
      } else {
        stalled.push_back(r);
      }
    };
    for (const auto& [r, key] : t.behind) classify(r, key, -1);
    if (!t.ask.empty()) {
      std::vector<int> world;
      for (int r : t.ask) world.push_back(world_ranks[static_cast<size_t>(r)]);
      std::vector<diag::Answer> answers = diag::query(id, world, 1.0);
      for (size_t i = 0; i < answers.size(); ++i) {
        const diag::Answer& a = answers[i];
        if (!a.replied)
          silent.push_back(t.ask[i]);
        else
          classify(t.ask[i], a.knows_group ? a.entered : 0, a.knows_group ? a.kind : -1);
      }
    }
    if (not_arrived.empty() && size > 2) {
      // Everyone this rank was waiting on had arrived (e.g. a host-local peer stuck
      // on a remote host): ask the rest of the group where they are.
      std::vector<int> others, world;
      for (int r = 0; r < size; ++r) {
        bool seen = r == rank || std::count(t.ask.begin(), t.ask.end(), r) > 0;
        for (const auto& b : t.behind) seen = seen || b.first == r;
        if (!seen) {
          others.push_back(r);
          world.push_back(world_ranks[static_cast<size_t>(r)]);
        }
      }
      std::vector<diag::Answer> answers = diag::query(id, world, 1.0);
      for (size_t i = 0; i < answers.size(); ++i) {
        if (!answers[i].replied)
          silent.push_back(others[i]);
        else
          classify(others[i], answers[i].knows_group ? answers[i].entered : 0,
                   answers[i].knows_group ? answers[i].kind : -1);
      }
    }
    std::sort(not_arrived.begin(), not_arrived.end());
    std::sort(stalled.begin(), stalled.end());
    if (!not_arrived.empty()) {
      msg += strprintf(": ranks %s did not arrive (", rank_list(not_arrived, world_ranks).c_str());
      for (size_t i = 0; i < notes.size(); ++i) {
        if (i) msg += "; ";
        msg += notes[i];
      }
      msg += ")";
    } else {
      msg += ": every rank entered it";
    }
    if (!stalled.empty()) msg += strprintf("; ranks %s are inside it too", rank_list(stalled, world_ranks).c_str());
    if (!silent.empty())
      msg += strprintf("; ranks %s did not answer a status query (dead, or stuck outside distllm)",
                       rank_list(silent, world_ranks).c_str());
    if (!t.detail.empty()) msg += "; this rank was waiting in " + t.detail;
  }
  mark_failed(msg);
  throw CommTimeoutError(msg, op_kind_name(op.kind), name, ctx.seq, not_arrived);
}

void ProcessGroup::Impl::debug_check(const Op& op, const OpContext& ctx) {
  const size_t n = static_cast<size_t>(size);
  Descriptor mine = describe_args(op, ctx.seq);
  std::vector<Descriptor> all(n);
  Op ag;
  ag.kind = OpKind::kAllgather;
  ag.dtype = DType::kU8;
  ag.in = &mine;
  ag.out = all.data();
  ag.count = sizeof(Descriptor);
  backend->run(ag, ctx);
  for (size_t r = 1; r < n; ++r) {
    if (std::memcmp(&all[r], &all[0], sizeof(Descriptor)) != 0) {
      throw CommMismatchError(strprintf("debug check on group '%s': rank 0 called %s but rank %zu called %s",
                                        name.c_str(), format_args(all[0]).c_str(), r, format_args(all[r]).c_str()));
    }
  }
  if (op.kind != OpKind::kAlltoallv) return;
  // Each rank's send counts must match what its peers expect to receive.
  std::vector<int64_t> sends(op.counts.begin(), op.counts.end()), got(n);
  Op a2a;
  a2a.kind = OpKind::kAlltoall;
  a2a.dtype = DType::kI64;
  a2a.in = sends.data();
  a2a.out = got.data();
  a2a.count = 1;
  backend->run(a2a, ctx);
  int64_t report[3] = {-1, 0, 0};  // first sender whose count disagrees, with both counts
  for (size_t s = 0; s < n; ++s) {
    if (static_cast<size_t>(got[s]) != op.recv_counts[s]) {
      report[0] = static_cast<int64_t>(s);
      report[1] = got[s];
      report[2] = static_cast<int64_t>(op.recv_counts[s]);
      break;
    }
  }
  std::vector<int64_t> reports(3 * n);
  Op ag2;
  ag2.kind = OpKind::kAllgather;
  ag2.dtype = DType::kI64;
  ag2.in = report;
  ag2.out = reports.data();
  ag2.count = 3;
  backend->run(ag2, ctx);
  for (size_t r = 0; r < n; ++r) {
    if (reports[3 * r] >= 0)
      throw CommMismatchError(strprintf(
          "debug check on group '%s': alltoallv#%llu: rank %lld sends %lld elements to rank %zu but rank %zu expects "
          "%lld",
          name.c_str(), static_cast<unsigned long long>(ctx.seq), static_cast<long long>(reports[3 * r]),
          static_cast<long long>(reports[3 * r + 1]), r, r, static_cast<long long>(reports[3 * r + 2])));
  }
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
