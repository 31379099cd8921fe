// `distllm bench comm`: nccl-tests-style collective benchmark, run under mpirun.
//
//   mpirun -n 2 distllm bench comm --op allreduce --backend shm -b 8 -e 256M -f 4
//
// Prints nccl-tests' columns (size, count, type, redop, root; then time, algbw,
// busbw, #wrong out-of-place and in-place) with nccl-tests' bus-bandwidth factors,
// plus %mbw: the modelled memory traffic of the operation (every rank reads its
// input once and writes its output once) per second, as a share of the memory
// bandwidth the benchmark measures first (STREAM triad on every rank at once).
// On one host all ranks share that bandwidth, so it bounds every backend.
//
// --backend raw-mpi calls MPI_Allreduce & co. directly on MPI_COMM_WORLD (plain
// Open MPI, MPI_Init without threads): the baseline of bench/comm_compare.py.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/comm/mpi_util.h"
#include "distllm/comm/world.h"

namespace distllm {
namespace {

using comm::DType;
using comm::ReduceOp;

enum class Coll { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kAlltoall, kReduce };

struct CollInfo {
  Coll coll;
  const char* name;
  bool total_size;  // size = all ranks' data (count x n), as nccl-tests sizes it
  bool rooted;
  bool reduces;
};

const CollInfo kColls[] = {
    {Coll::kAllreduce, "allreduce", false, false, true},   {Coll::kAllgather, "allgather", true, false, false},
    {Coll::kReduceScatter, "reducescatter", true, false, true}, {Coll::kBroadcast, "broadcast", false, true, false},
    {Coll::kAlltoall, "alltoall", true, false, false},    {Coll::kReduce, "reduce", false, true, true},
};

// nccl-tests' bus-bandwidth factors.
double bus_factor(Coll c, int n) {
  switch (c) {
    case Coll::kAllreduce: return 2.0 * (n - 1) / n;
    case Coll::kAllgather:
    case Coll::kReduceScatter:
    case Coll::kAlltoall: return static_cast<double>(n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce: return 1.0;
  }
  return 1.0;
}

// Bytes that must pass through memory, all ranks together, if every rank reads its
// input once and writes its output once. `size` as nccl-tests reports it.
double traffic_bytes(Coll c, int n, double size) {
  switch (c) {
    case Coll::kAllreduce: return 2.0 * n * size;        // n inputs of S, n outputs of S
    case Coll::kBroadcast: return size + n * size;       // root's input, n outputs
    case Coll::kReduce: return n * size + size;          // n inputs, root's output
    case Coll::kAllgather: return size + n * size;       // n blocks of S/n in, n outputs of S
    case Coll::kReduceScatter: return n * size + size;   // n inputs of S, n blocks of S/n out
    case Coll::kAlltoall: return 2.0 * n * size;         // n inputs and n outputs of S
  }
  return 0;
}

// ---- the two ways of running an operation ----

class Runner {
 public:
  virtual ~Runner() = default;
  // count: per-rank elements for allreduce/broadcast/reduce, per-block otherwise.
  virtual void run(Coll c, const void* in, void* out, size_t count, DType t, ReduceOp op, int root) = 0;
  virtual std::string describe() const = 0;
};

class GroupRunner : public Runner {
 public:
  explicit GroupRunner(comm::ProcessGroupPtr g) : g_(std::move(g)) {}
  void run(Coll c, const void* in, void* out, size_t count, DType t, ReduceOp op, int root) override {
    switch (c) {
      case Coll::kAllreduce: g_->allreduce(in, out, count, t, op); break;
      case Coll::kAllgather: g_->allgather(in, out, count, t); break;
      case Coll::kReduceScatter: g_->reduce_scatter(in, out, count, t, op); break;
      case Coll::kBroadcast: g_->broadcast(in, out, count, t, root); break;
      case Coll::kAlltoall: g_->alltoall(in, out, count, t); break;
      case Coll::kReduce: g_->reduce(in, out, count, t, op, root); break;
    }
  }
  std::string describe() const override {
    return strprintf("backend %s (%d ranks, %d host%s)", g_->backend_name().c_str(), g_->size(), g_->num_hosts(),
                     g_->num_hosts() == 1 ? "" : "s");
  }

 private:
  comm::ProcessGroupPtr g_;
};

class RawMpiRunner : public Runner {
 public:
  void run(Coll c, const void* in, void* out, size_t count, DType t, ReduceOp op, int root) override {
    const int n = static_cast<int>(count);
    MPI_Datatype dt = comm::mpi_dtype(t);
    MPI_Op mop = comm::mpi_op(op);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const void* send = in == out ? MPI_IN_PLACE : in;
    switch (c) {
      case Coll::kAllreduce: DL_MPI(MPI_Allreduce(send, out, n, dt, mop, MPI_COMM_WORLD)); break;
      case Coll::kAllgather: {
        const void* s = in == static_cast<const uint8_t*>(out) + rank * count * dtype_size(t) ? MPI_IN_PLACE : in;
        DL_MPI(MPI_Allgather(s, n, dt, out, n, dt, MPI_COMM_WORLD));
        break;
      }
      case Coll::kReduceScatter: {
        // MPI's in-place form keeps the whole input in the receive buffer.
        bool inplace = out == static_cast<const uint8_t*>(in) + rank * count * dtype_size(t);
        if (inplace) {
          DL_MPI(MPI_Reduce_scatter_block(MPI_IN_PLACE, const_cast<void*>(in), n, dt, mop, MPI_COMM_WORLD));
          // MPI leaves the block at the start; our in-place layout has it at rank*count.
          if (rank != 0) std::memmove(out, in, count * dtype_size(t));
        } else
          DL_MPI(MPI_Reduce_scatter_block(in, out, n, dt, mop, MPI_COMM_WORLD));
        break;
      }
      case Coll::kBroadcast:
        if (rank == root && in != out) std::memcpy(out, in, count * dtype_size(t));
        DL_MPI(MPI_Bcast(out, n, dt, root, MPI_COMM_WORLD));
        break;
      case Coll::kAlltoall: DL_MPI(MPI_Alltoall(send, n, dt, out, n, dt, MPI_COMM_WORLD)); break;
      case Coll::kReduce:
        DL_MPI(MPI_Reduce(rank == root ? send : in, out, n, dt, mop, root, MPI_COMM_WORLD));
        break;
    }
  }
  std::string describe() const override {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return strprintf("backend raw-mpi (plain MPI collectives on MPI_COMM_WORLD, %d ranks)", n);
  }
};

// ---- data: small integers, so every result is exact and checkable ----

double value(int rank, size_t i, DType t, ReduceOp op) {
  uint64_t h = mix64(static_cast<uint64_t>(rank) * 1000003u + i);
  if (op == ReduceOp::kProd) return t == DType::kU8 ? static_cast<double>(1 + h % 3) : (h % 4 == 1 ? 2.0 : 1.0);
  return t == DType::kU8 ? static_cast<double>(h % 5) : static_cast<double>(static_cast<int>(h % 9) - 4);
}

void store(DType t, void* base, size_t i, double v) {
  auto* p = static_cast<uint8_t*>(base) + i * dtype_size(t);
  switch (t) {
    case DType::kF32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DType::kF64: std::memcpy(p, &v, 8); break;
    case DType::kBF16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::kF16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case DType::kI64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case DType::kU8: *p = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    default: comm::check_collective_dtype(t);
  }
}

double load(DType t, const void* base, size_t i) {
  const auto* p = static_cast<const uint8_t*>(base) + i * dtype_size(t);
  switch (t) {
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kF64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
    case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
    case DType::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::kI64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DType::kU8: return *p;
    default: comm::check_collective_dtype(t);
  }
  return 0;
}

double reduce_ref(size_t i, int n, DType t, ReduceOp op) {
  double acc = value(0, i, t, op);
  for (int r = 1; r < n; ++r) {
    double v = value(r, i, t, op);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    else if (op == ReduceOp::kProd) acc *= v;
    else if (op == ReduceOp::kMax) acc = std::max(acc, v);
    else acc = std::min(acc, v);
  }
  if (op != ReduceOp::kAvg) return acc;
  if (t == DType::kF64) return acc / n;
  if (dtype_is_float(t)) return static_cast<float>(acc) / static_cast<float>(n);
  return std::trunc(acc / n);
}

struct Case {
  const CollInfo* info;
  DType t;
  ReduceOp op;
  int root, rank, n;
  size_t count;  // per-rank (allreduce, broadcast, reduce) or per-block elements
  size_t in_elems() const {
    if (info->coll == Coll::kAllgather) return count;
    if (info->total_size) return count * static_cast<size_t>(n);
    return count;
  }
  size_t out_elems() const {
    if (info->coll == Coll::kReduceScatter) return count;
    if (info->total_size) return count * static_cast<size_t>(n);
    return count;
  }
};

// Fills the input with this rank's data (the in-place layouts put it where the
// operation expects it).
void fill_input(const Case& c, void* in) {
  for (size_t i = 0; i < c.in_elems(); ++i) store(c.t, in, i, value(c.rank, i, c.t, c.op));
}

// Number of output elements that differ from the reference.
int64_t count_wrong(const Case& c, const void* out) {
  int64_t wrong = 0;
  auto expect = [&](size_t j, double want) {
    if (load(c.t, out, j) != want) ++wrong;
  };
  const int n = c.n;
  switch (c.info->coll) {
    case Coll::kAllreduce:
      for (size_t i = 0; i < c.count; ++i) expect(i, reduce_ref(i, n, c.t, c.op));
      break;
    case Coll::kReduce:
      if (c.rank == c.root)
        for (size_t i = 0; i < c.count; ++i) expect(i, reduce_ref(i, n, c.t, c.op));
      break;
    case Coll::kBroadcast:
      for (size_t i = 0; i < c.count; ++i) expect(i, value(c.root, i, c.t, c.op));
      break;
    case Coll::kAllgather:
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < c.count; ++i) expect(r * c.count + i, value(r, i, c.t, c.op));
      break;
    case Coll::kReduceScatter:
      for (size_t i = 0; i < c.count; ++i) expect(i, reduce_ref(c.rank * c.count + i, n, c.t, c.op));
      break;
    case Coll::kAlltoall:
      for (int s = 0; s < n; ++s)
        for (size_t i = 0; i < c.count; ++i) expect(s * c.count + i, value(s, c.rank * c.count + i, c.t, c.op));
      break;
  }
  return wrong;
}

// STREAM triad on every rank at once; returns the machine's aggregate GB/s.
double measure_membw(int rank, int n) {
  (void)rank;
  const size_t elems = size_t{1} << 23;  // 3 x 64 MiB per rank: far beyond the caches
  AlignedBuffer<double> a(elems), b(elems), c(elems);
  for (size_t i = 0; i < elems; ++i) {
    b[i] = 1.0 + static_cast<double>(i % 7);
    c[i] = 2.0;
  }
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    Timer t;
    for (size_t i = 0; i < elems; ++i) a[i] = b[i] + 3.0 * c[i];
    double mine = t.seconds(), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::max(best, 24.0 * static_cast<double>(elems) * n / slowest / 1e9);
  }
  volatile double sink = a[elems / 2];
  (void)sink;
  return best;
}

struct Timing {
  double us = 0;
  int64_t wrong = 0;
};

struct Schedule {
  int iters;        // -n: iterations per measurement...
  int warmup;       // -w
  double min_time;  // ...raised until the timed loop lasts this long (tiny, noisy ops)
  double budget;    // ...lowered until it fits this (huge, slow ops); 0: never
};

Timing measure(Runner& runner, const Case& c, bool in_place, void* sendbuf, void* recvbuf, const Schedule& plan,
               bool check) {
  int iters = plan.iters, warmup = plan.warmup;
  const size_t es = dtype_size(c.t);
  const void* in = sendbuf;
  void* out = recvbuf;
  size_t block = c.count * es;
  if (in_place) {
    switch (c.info->coll) {
      case Coll::kAllgather: in = static_cast<uint8_t*>(recvbuf) + c.rank * block; break;
      case Coll::kReduceScatter: out = static_cast<uint8_t*>(sendbuf) + c.rank * block; break;
      default: out = sendbuf; break;
    }
  }
  void* fill_at = const_cast<void*>(in);
  fill_input(c, fill_at);
  size_t count = c.count;
  // The first warm-up run also estimates the cost, so slow sizes (hundreds of MiB
  // through a slow path) fit the time budget with fewer iterations. Every rank
  // uses the slowest estimate, so all run the same number.
  Timer first;
  runner.run(c.info->coll, in, out, count, c.t, c.op, c.root);
  double once = first.seconds(), slowest_once = 0;
  MPI_Allreduce(&once, &slowest_once, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double once_s = std::max(slowest_once, 1e-9);
  iters = std::max(iters, static_cast<int>(std::min(1e6, plan.min_time / once_s)));
  if (plan.budget > 0) iters = std::clamp(static_cast<int>(std::min(1e9, plan.budget / once_s)), 1, iters);
  warmup = std::min(warmup, iters);
  for (int i = 1; i < warmup; ++i) runner.run(c.info->coll, in, out, count, c.t, c.op, c.root);
  MPI_Barrier(MPI_COMM_WORLD);
  Timer timer;
  for (int i = 0; i < iters; ++i) runner.run(c.info->coll, in, out, count, c.t, c.op, c.root);
  double mine = timer.seconds() / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  Timing result;
  result.us = slowest * 1e6;
  if (check) {
    // Repeated in-place runs change the data: start over from known inputs.
    fill_input(c, fill_at);
    runner.run(c.info->coll, in, out, count, c.t, c.op, c.root);
    int64_t wrong = count_wrong(c, out), total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    result.wrong = total;
  }
  return result;
}

int run_bench_comm(Args& args) {
  std::string op_name = args.get_string("op", "allreduce",
                                        "allreduce | allgather | reducescatter | broadcast | alltoall | reduce");
  std::string backend =
      args.get_string("backend", "auto", "auto | shm | mpi | hierarchical | raw-mpi (plain MPI_* on MPI_COMM_WORLD)");
  auto size_flag = [&](const char* short_name, const char* long_name, const char* fallback, const char* help) {
    std::optional<std::string> s = args.get_optional(short_name, help);
    std::optional<std::string> l = args.get_optional(long_name, std::string("same as -") + short_name);
    std::string v = s ? *s : (l ? *l : fallback);
    return parse_size(v, std::string("-") + short_name);
  };
  int64_t minbytes = size_flag("b", "minbytes", "8", "smallest size in bytes, e.g. 8, 1K, 1M (default 8)");
  int64_t maxbytes = size_flag("e", "maxbytes", "64M", "largest size in bytes (default 64M)");
  int64_t factor = size_flag("f", "stepfactor", "4", "size multiplier between rows (default 4)");
  int64_t iters = size_flag("n", "iters", "100", "timed iterations per size, at most (default 100; see --time-budget)");
  int64_t warmup = size_flag("w", "warmup_iters", "5", "warm-up iterations per size (default 5)");
  std::string dtype_name = args.get_string("dtype", "f32", "f32 | f64 | bf16 | f16 | i32 | i64 | u8");
  std::string redop_name = args.get_string("redop", "sum", "sum | avg | max | min | prod");
  int64_t root = args.get_int("root", 0, "root rank of broadcast and reduce");
  bool no_check = args.get_flag("no-check", "skip the #wrong correctness check");
  double membw = args.get_double("membw", 0, "memory bandwidth in GB/s; 0 measures it (STREAM triad)");
  double budget = args.get_double("time-budget", 1.0,
                                  "seconds to spend timing one size and mode: slow sizes get fewer than -n "
                                  "iterations (0: no limit)");
  double min_time = args.get_double("min-time", 0.01,
                                    "seconds the timed loop lasts at least: fast sizes get more than -n iterations");
  double timeout = args.get_double("timeout", 120, "per-operation timeout in seconds");
  int64_t chunk = args.get_int("shm-chunk", 0, "shared-memory pipeline chunk in bytes (0: default)");
  int64_t fake_hosts =
      args.get_int("test-only-ranks-per-host", 0, "TEST ONLY: pretend every k ranks form a host (hierarchical)");
  if (args.help_or_finish()) return 0;

  const CollInfo* info = nullptr;
  for (const CollInfo& c : kColls)
    if (op_name == c.name) info = &c;
  DL_CHECK(info != nullptr, "--op '%s' is not one of allreduce, allgather, reducescatter, broadcast, alltoall, reduce",
           op_name.c_str());
  DType t = parse_dtype(dtype_name);
  comm::check_collective_dtype(t);
  ReduceOp op = comm::parse_reduce_op(redop_name);
  DL_CHECK(minbytes >= 0 && maxbytes >= minbytes, "-b %lld and -e %lld must satisfy 0 <= b <= e",
           static_cast<long long>(minbytes), static_cast<long long>(maxbytes));
  DL_CHECK(factor >= 2, "-f must be at least 2, got %lld", static_cast<long long>(factor));
  DL_CHECK(iters >= 1 && warmup >= 0, "-n must be >= 1 and -w >= 0");
  const bool raw = backend == "raw-mpi";
  if (raw) {
    DL_CHECK(t != DType::kBF16 && t != DType::kF16, "raw-mpi has no %s reduction (MPI lacks the type)",
             dtype_short_name(t));
    DL_CHECK(op != ReduceOp::kAvg, "raw-mpi has no avg (MPI lacks the operator)");
  }

  std::unique_ptr<Runner> runner;
  comm::ProcessGroupPtr world;
  if (raw) {
    int provided = 0;
    DL_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided));
    runner = std::make_unique<RawMpiRunner>();
  } else {
    comm::GroupOptions o;
    o.backend = backend;
    o.timeout_s = timeout;
    o.shm_chunk_bytes = static_cast<size_t>(chunk);
    o.test_only_ranks_per_host = static_cast<int>(fake_hosts);
    world = comm::init_process_group(o);
    runner = std::make_unique<GroupRunner>(world);
  }
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  DL_CHECK(root >= 0 && root < n, "--root %lld is outside [0, %d)", static_cast<long long>(root), n);
  if (membw <= 0) membw = measure_membw(rank, n);
  // Let MPI finish connecting every pair before anything is timed (under srun,
  // Open MPI looks peers up lazily and the first exchanges take milliseconds).
  for (int i = 0; i < 3; ++i) {
    int x = 1, y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  const double factor_bus = bus_factor(info->coll, n);
  // Physical bound on busbw: time >= traffic / membw, traffic proportional to size.
  const double bound_busbw = factor_bus * membw / (traffic_bytes(info->coll, n, 1.0));
  if (rank == 0) {
    std::printf("# distllm bench comm: op %s, %s, dtype %s, redop %s, iters %lld, warmup %lld\n", info->name,
                runner->describe().c_str(), dtype_nccl_name(t), info->reduces ? comm::reduce_op_name(op) : "none",
                static_cast<long long>(iters), static_cast<long long>(warmup));
    std::printf("# memory bandwidth: %.2f GB/s (STREAM triad, %d ranks at once)\n", membw, n);
    std::printf("# traffic model: every rank reads its input and writes its output once -> busbw <= %.2f GB/s\n",
                bound_busbw);
    std::printf("# %%mbw = modelled traffic / time / memory bandwidth; time = slowest rank's mean over -n %lld "
                "iterations, more to last --min-time %.3g s, fewer to fit --time-budget %.3g s\n#\n",
                static_cast<long long>(iters), min_time, budget);
    std::printf("# %10s %12s %8s %6s %6s   %9s %7s %7s %6s %5s   %9s %7s %7s %6s %5s\n", "", "", "", "", "",
                "out-of-place", "", "", "", "", "in-place", "", "", "", "");
    std::printf("# %10s %12s %8s %6s %6s   %9s %7s %7s %6s %5s   %9s %7s %7s %6s %5s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "%mbw", "time", "algbw", "busbw", "#wrong",
                "%mbw");
    std::printf("# %10s %12s %8s %6s %6s   %9s %7s %7s %6s %5s   %9s %7s %7s %6s %5s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "");
    std::fflush(stdout);
  }

  const size_t es = dtype_size(t);
  const size_t unit = info->total_size ? es * static_cast<size_t>(n) : es;
  // Buffers sized for the largest row, touched once before timing.
  size_t max_count = static_cast<size_t>(maxbytes) / unit;
  Case probe{info, t, op, static_cast<int>(root), rank, n, max_count};
  AlignedBuffer<uint8_t> sendbuf(std::max<size_t>(probe.in_elems() * es, 64));
  AlignedBuffer<uint8_t> recvbuf(std::max<size_t>(probe.out_elems() * es, 64));
  const Schedule plan{static_cast<int>(iters), static_cast<int>(warmup), min_time, budget};
  // One untimed pass over the first size: the first operations of a process pay
  // for cold caches and code, which would otherwise land in the first row.
  {
    size_t count = static_cast<size_t>(std::max<int64_t>(minbytes, 1)) / unit;
    Case c{info, t, op, static_cast<int>(root), rank, n, count};
    measure(*runner, c, false, sendbuf.data(), recvbuf.data(), plan, false);
  }
  double sum_busbw = 0;
  int rows = 0;
  int64_t total_wrong = 0;
  for (int64_t bytes = std::max<int64_t>(minbytes, 1); bytes <= maxbytes; bytes *= factor) {
    size_t count = static_cast<size_t>(bytes) / unit;
    Case c{info, t, op, static_cast<int>(root), rank, n, count};
    const double size = static_cast<double>(count * unit);
    Timing oop = measure(*runner, c, false, sendbuf.data(), recvbuf.data(), plan, !no_check);
    Timing ip = measure(*runner, c, true, sendbuf.data(), recvbuf.data(), plan, !no_check);
    total_wrong += oop.wrong + ip.wrong;
    if (rank == 0) {
      auto cols = [&](const Timing& tm) {
        double algbw = tm.us > 0 ? size / (tm.us * 1e-6) / 1e9 : 0;
        double busbw = algbw * factor_bus;
        double mbw = tm.us > 0 ? traffic_bytes(info->coll, n, size) / (tm.us * 1e-6) / 1e9 / membw * 100 : 0;
        std::string wrong = no_check ? "N/A" : std::to_string(tm.wrong);
        return std::make_pair(strprintf("%9.2f %7.2f %7.2f %6s %5.0f", tm.us, algbw, busbw, wrong.c_str(), mbw),
                              busbw);
      };
      auto [a, bus_a] = cols(oop);
      auto [b, bus_b] = cols(ip);
      sum_busbw += bus_a;
      ++rows;
      (void)bus_b;
      std::printf("  %10.0f %12zu %8s %6s %6d   %s   %s\n", size, count * (unit / es), dtype_nccl_name(t),
                  info->reduces ? comm::reduce_op_name(op) : "none", info->rooted ? static_cast<int>(root) : -1,
                  a.c_str(), b.c_str());
      std::fflush(stdout);
    }
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong), total_wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.3f\n#\n", rows ? sum_busbw / rows : 0.0);
  }
  if (raw) {
    MPI_Finalize();
  } else {
    world.reset();
    comm::finalize();
  }
  return total_wrong == 0 ? 0 : 1;
}

DISTLLM_REGISTER_COMMAND("bench comm", "nccl-tests-style collective benchmark (run under mpirun)", run_bench_comm);

}  // namespace
}  // namespace distllm
