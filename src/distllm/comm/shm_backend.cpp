#include "distllm/comm/shm_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/comm/backoff.h"
#include "distllm/comm/mpi_util.h"
#include "distllm/comm/reduce.h"

namespace distllm::comm {

namespace {

constexpr size_t kLine = 64;
constexpr size_t kInline = 56;  // payload bytes that share the epoch's cache line
constexpr uint64_t kMagic = 0x6d6d6f636c6c6464ull;

struct alignas(kLine) EpochLine {
  std::atomic<uint64_t> epoch;
  uint8_t payload[kInline];
};

struct Header {
  uint64_t magic;
  uint64_t ranks;
  uint64_t chunk;
};

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
size_t clamp_len(size_t total, size_t begin, size_t step) {
  return begin >= total ? 0 : std::min(step, total - begin);
}

}  // namespace

struct ShmBackend::Ctl {
  EpochLine line[2];
  alignas(kLine) std::atomic<uint64_t> board;  // status key of the last operation entered
};

ShmBackend::ShmBackend(MPI_Comm comm, size_t chunk_bytes) : comm_(comm) {
  DL_MPI(MPI_Comm_rank(comm, &rank_));
  DL_MPI(MPI_Comm_size(comm, &n_));
  chunk_ = round_up(std::max<size_t>(chunk_bytes, kLine * static_cast<size_t>(n_)), 4096);
  piece_ = chunk_ / static_cast<size_t>(n_) / kLine * kLine;
  // Non-temporal output stores are off unless asked for: on the Zen 5 VM this was
  // tuned on they gave no gain at 16-128 MiB (the chunked staging already keeps the
  // working set in cache, and plain full-line stores stream well).
  stream_threshold_ = SIZE_MAX;
  // Tuning knobs (read once; every rank of a job sees the same environment).
  if (const char* v = std::getenv("DISTLLM_COMM_SHM_ALGO")) {
    std::string a = v;
    DL_CHECK(a == "auto" || a == "oneshot" || a == "twophase",
             "DISTLLM_COMM_SHM_ALGO='%s' is not one of auto, oneshot, twophase", v);
    algo_ = a == "oneshot" ? 1 : a == "twophase" ? 2 : 0;
  }
  if (const char* v = std::getenv("DISTLLM_COMM_SHM_STREAM"))
    stream_threshold_ = static_cast<size_t>(parse_size(v, "DISTLLM_COMM_SHM_STREAM"));
  size_t ctl_bytes = round_up(sizeof(Ctl) * static_cast<size_t>(n_), 4096);
  size_t data_bytes = chunk_ * (2 * static_cast<size_t>(n_) + 2);
  segment_ = std::make_unique<ShmSegment>(comm, 4096 + ctl_bytes + data_bytes);
  uint8_t* base = segment_->data();
  auto* header = reinterpret_cast<Header*>(base);
  ctl_ = reinterpret_cast<Ctl*>(base + 4096);
  data_ = base + 4096 + ctl_bytes;
  if (rank_ == 0) {
    header->magic = kMagic;
    header->ranks = static_cast<uint64_t>(n_);
    header->chunk = chunk_;
    for (int r = 0; r < n_; ++r) new (&ctl_[r]) Ctl{};
  }
  // The segment layout is initialised before anyone uses it.
  DL_MPI(MPI_Barrier(comm));
  DL_ASSERT(header->magic == kMagic && header->ranks == static_cast<uint64_t>(n_));
  srcs_.resize(static_cast<size_t>(n_));
}

ShmBackend::~ShmBackend() = default;

ShmBackend::Ctl& ShmBackend::ctl(int r) const { return ctl_[r]; }
uint8_t* ShmBackend::staging(int r, uint64_t e) const { return data_ + (static_cast<size_t>(r) * 2 + (e & 1)) * chunk_; }
uint8_t* ShmBackend::result(uint64_t e) const { return data_ + (static_cast<size_t>(n_) * 2 + (e & 1)) * chunk_; }
uint8_t* ShmBackend::inline_payload(int r, uint64_t e) const { return ctl_[r].line[e & 1].payload; }

void ShmBackend::arrive(uint64_t e) { ctl_[rank_].line[e & 1].epoch.store(e, std::memory_order_release); }

void ShmBackend::wait_all(uint64_t e, const OpContext& ctx) {
  for (int r = 0; r < n_; ++r) {
    if (r == rank_) continue;
    const std::atomic<uint64_t>& flag = ctl_[r].line[e & 1].epoch;
    if (flag.load(std::memory_order_acquire) >= e) continue;
    Poller poll(ctx, ctx.spin_limit);
    while (flag.load(std::memory_order_acquire) < e) {
      if (!poll.next()) timeout(e, ctx);
    }
  }
}

void ShmBackend::stage_pieces(uint64_t e, const uint8_t* in, const size_t* counts, const size_t* displs, size_t k,
                              size_t pe, size_t es) const {
  for (int d = 0; d < n_; ++d) {
    const size_t len = clamp_len(counts[d], k * pe, pe);
    if (d != rank_ && len) std::memcpy(staging(rank_, e) + d * piece_, in + (displs[d] + k * pe) * es, len * es);
  }
}

void ShmBackend::timeout(uint64_t e, const OpContext&) {
  BackendTimeout t;
  for (int r = 0; r < n_; ++r) {
    if (r == rank_) continue;
    if (ctl_[r].line[e & 1].epoch.load(std::memory_order_acquire) < e)
      t.behind.emplace_back(r, ctl_[r].board.load(std::memory_order_relaxed));
  }
  t.detail = "shared-memory barrier";
  throw t;
}

void ShmBackend::run(const Op& op, const OpContext& ctx) {
  ctl_[rank_].board.store(status_key(ctx.seq, ctx.phase), std::memory_order_relaxed);
  switch (op.kind) {
    case OpKind::kAllreduce: return allreduce(op, ctx);
    case OpKind::kReduce: return reduce(op, ctx);
    case OpKind::kBroadcast: return broadcast(op, ctx);
    case OpKind::kAllgather:
    case OpKind::kAllgatherv: return allgather(op, ctx, false);
    case OpKind::kGather: return allgather(op, ctx, true);
    case OpKind::kScatter: return scatter(op, ctx);
    case OpKind::kReduceScatter:
    case OpKind::kReduceScatterV: return reduce_scatter(op, ctx);
    case OpKind::kAlltoall:
    case OpKind::kAlltoallv: return alltoall(op, ctx);
    case OpKind::kBarrier: return barrier(++epoch_, ctx);
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kBatchP2P: return run_p2p(comm_, op, ctx);
    case OpKind::kSplit: break;
  }
  DL_ASSERT(false);
}

// ---- all-reduce ----

void ShmBackend::allreduce(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), bytes = op.count * es;
  if (op.count == 0) return;
  if (n_ == 1) {
    copy_bytes(op.out, op.in, bytes, bytes >= stream_threshold_);
    return;
  }
  if (bytes <= kInline) {
    // One barrier; the data travels in the epoch's cache line.
    uint64_t e = ++epoch_;
    std::memcpy(inline_payload(rank_, e), op.in, bytes);
    barrier(e, ctx);
    for (int r = 0; r < n_; ++r) srcs_[r] = inline_payload(r, e);
    reduce_sources(op.out, srcs_.data(), n_, op.count, op.dtype, op.reduce, n_);
    return;
  }
  // With two ranks both schedules move the same bytes across cores (the peer's
  // half twice, or its whole message once) and one-shot measured faster: it reads
  // fewer shared lines and needs no final barrier. With more ranks two-phase moves
  // 2(n-1)/n of the message across cores instead of n-1; it pays one extra barrier,
  // which only a message of more than one chunk amortises.
  bool one_shot = algo_ == 1 || (algo_ == 0 && (n_ == 2 || bytes <= chunk_));
  if (one_shot) {
    allreduce_one_shot(op, ctx);
  } else {
    allreduce_two_phase(op, ctx);
  }
}

// Every rank stages a chunk, then reduces the whole chunk from all ranks' copies.
void ShmBackend::allreduce_one_shot(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), step = chunk_ / es;
  const bool stream = op.count * es >= stream_threshold_;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  for (size_t off = 0; off < op.count; off += step) {
    size_t len = std::min(step, op.count - off);
    uint64_t e = ++epoch_;
    std::memcpy(staging(rank_, e), in + off * es, len * es);
    barrier(e, ctx);
    // Rank order is the same everywhere, so every rank computes identical bits.
    for (int r = 0; r < n_; ++r) srcs_[r] = r == rank_ ? in + off * es : staging(r, e);
    reduce_sources(out + off * es, srcs_.data(), n_, len, op.dtype, op.reduce, n_, stream);
  }
  if (stream) store_fence();
}

// Reduce-scatter + all-gather. Rank d owns slice d of the message; in step k every
// rank stages piece k of every other rank's slice, rank d reduces piece k of its own
// slice from all ranks into R, and after the next barrier everyone copies the
// reduced pieces out.
void ShmBackend::allreduce_two_phase(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), pe = piece_ / es;
  const size_t n = static_cast<size_t>(n_);
  const bool stream = op.count * es >= stream_threshold_;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  std::vector<size_t> begin(n + 1);
  for (size_t d = 0; d <= n; ++d) begin[d] = op.count * d / n;
  size_t longest = 0;
  std::vector<size_t> counts(n);
  for (size_t d = 0; d < n; ++d) longest = std::max(longest, counts[d] = begin[d + 1] - begin[d]);
  const size_t steps = (longest + pe - 1) / pe;
  auto piece_len = [&](size_t d, size_t k) { return clamp_len(counts[d], k * pe, pe); };
  auto copy_out = [&](uint64_t e, size_t k) {
    for (size_t d = 0; d < n; ++d) {
      if (static_cast<int>(d) == rank_) continue;
      size_t len = piece_len(d, k);
      if (len) copy_bytes(out + (begin[d] + k * pe) * es, result(e) + d * piece_, len * es, stream);
    }
  };
  uint64_t prev = 0;
  for (size_t k = 0; k < steps; ++k) {
    uint64_t e = ++epoch_;
    stage_pieces(e, in, counts.data(), begin.data(), k, pe, es);
    barrier(e, ctx);
    if (k > 0) copy_out(prev, k - 1);
    size_t len = piece_len(static_cast<size_t>(rank_), k);
    if (len) {
      const size_t mine = static_cast<size_t>(rank_);
      for (int r = 0; r < n_; ++r)
        srcs_[r] = r == rank_ ? in + (begin[mine] + k * pe) * es : staging(r, e) + mine * piece_;
      uint8_t* reduced = result(e) + mine * piece_;
      reduce_sources(reduced, srcs_.data(), n_, len, op.dtype, op.reduce, n_);
      copy_bytes(out + (begin[mine] + k * pe) * es, reduced, len * es, stream);
    }
    prev = e;
  }
  uint64_t e = ++epoch_;
  barrier(e, ctx);
  copy_out(prev, steps - 1);
  if (stream) store_fence();
}

// ---- reduce (to root): everyone stages, the root reduces each chunk ----

void ShmBackend::reduce(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), step = chunk_ / es;
  if (op.count == 0) return;
  const bool root = rank_ == op.root;
  if (n_ == 1) {
    copy_bytes(op.out, op.in, op.count * es);
    return;
  }
  const bool stream = op.count * es >= stream_threshold_;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  for (size_t off = 0; off < op.count; off += step) {
    size_t len = std::min(step, op.count - off);
    uint64_t e = ++epoch_;
    if (!root) std::memcpy(staging(rank_, e), in + off * es, len * es);
    barrier(e, ctx);
    if (root) {
      for (int r = 0; r < n_; ++r) srcs_[r] = r == rank_ ? in + off * es : staging(r, e);
      reduce_sources(out + off * es, srcs_.data(), n_, len, op.dtype, op.reduce, n_, stream);
    }
  }
  if (stream) store_fence();
}

// ---- broadcast ----

void ShmBackend::broadcast(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), bytes = op.count * es;
  if (op.count == 0) return;
  const bool root = rank_ == op.root;
  const bool stream = bytes >= stream_threshold_;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  if (n_ == 1 || bytes <= kInline) {
    if (root) copy_bytes(out, in, bytes, stream);
    if (n_ == 1) return;
    uint64_t e = ++epoch_;
    if (root) std::memcpy(inline_payload(rank_, e), in, bytes);
    barrier(e, ctx);
    if (!root) std::memcpy(out, inline_payload(op.root, e), bytes);
    return;
  }
  for (size_t off = 0; off < bytes; off += chunk_) {
    size_t len = std::min(chunk_, bytes - off);
    uint64_t e = ++epoch_;
    if (root) std::memcpy(staging(rank_, e), in + off, len);
    barrier(e, ctx);
    // The root's own copy reads the chunk while it is still in cache, alongside
    // the others' copies.
    copy_bytes(out + off, root ? in + off : staging(op.root, e), len, stream);
  }
  if (stream) store_fence();
}

// ---- all-gather(v) and gather: each rank stages its own block chunk by chunk ----

void ShmBackend::allgather(const Op& op, const OpContext& ctx, bool only_root) {
  const size_t es = dtype_size(op.dtype);
  const size_t n = static_cast<size_t>(n_);
  std::vector<size_t> counts = op.kind == OpKind::kAllgatherv ? op.counts : std::vector<size_t>(n, op.count);
  std::vector<size_t> displs = displacements(counts);
  const bool receives = !only_root || rank_ == op.root;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  size_t longest = *std::max_element(counts.begin(), counts.end()) * es;
  if (longest == 0) return;
  const size_t mine = counts[static_cast<size_t>(rank_)] * es;
  uint8_t* my_out = out + displs[static_cast<size_t>(rank_)] * es;
  const size_t total = (displs.back() + counts.back()) * es;
  const bool stream = total >= stream_threshold_;
  if (n_ == 1) {
    if (receives) copy_bytes(my_out, in, mine, stream);
    return;
  }
  const bool tiny = longest <= kInline;
  const size_t step = tiny ? kInline : chunk_;
  for (size_t off = 0; off < longest; off += step) {
    uint64_t e = ++epoch_;
    uint8_t* slot = tiny ? inline_payload(rank_, e) : staging(rank_, e);
    size_t len = clamp_len(mine, off, step);
    if (len) std::memcpy(slot, in + off, len);
    barrier(e, ctx);
    if (!receives) continue;
    for (size_t r = 0; r < n; ++r) {
      if (static_cast<int>(r) == rank_) continue;
      size_t rlen = clamp_len(counts[r] * es, off, step);
      const uint8_t* src = tiny ? inline_payload(static_cast<int>(r), e) : staging(static_cast<int>(r), e);
      if (rlen) copy_bytes(out + displs[r] * es + off, src, rlen, stream);
    }
    // Own block, chunk by chunk while it is in cache (a no-op in place).
    if (len) copy_bytes(my_out + off, in + off, len, stream);
  }
  if (stream) store_fence();
}

// ---- scatter: the root stages one piece per destination ----

void ShmBackend::scatter(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), bytes = op.count * es;
  if (op.count == 0) return;
  const bool root = rank_ == op.root;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  if (root) copy_bytes(out, in + static_cast<size_t>(rank_) * bytes, bytes);
  if (n_ == 1) return;
  for (size_t off = 0; off < bytes; off += piece_) {
    size_t len = std::min(piece_, bytes - off);
    uint64_t e = ++epoch_;
    if (root) {
      for (int d = 0; d < n_; ++d)
        if (d != rank_) std::memcpy(staging(rank_, e) + d * piece_, in + d * bytes + off, len);
    }
    barrier(e, ctx);
    if (!root) std::memcpy(out + off, staging(op.root, e) + static_cast<size_t>(rank_) * piece_, len);
  }
}

// ---- reduce-scatter(v): piece k of every slice per step; rank d reduces slice d ----

void ShmBackend::reduce_scatter(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), pe = piece_ / es;
  const size_t n = static_cast<size_t>(n_), me = static_cast<size_t>(rank_);
  std::vector<size_t> counts = op.kind == OpKind::kReduceScatterV ? op.counts : std::vector<size_t>(n, op.count);
  std::vector<size_t> displs = displacements(counts);
  const size_t longest = *std::max_element(counts.begin(), counts.end());
  if (longest == 0) return;
  const bool widen = op.widen_out_f32 && (op.dtype == DType::kBF16 || op.dtype == DType::kF16);
  const size_t out_es = widen ? 4 : es;
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  if (n_ == 1) {
    srcs_[0] = in;
    if (widen)
      reduce_sources(out, srcs_.data(), 1, counts[0], op.dtype, op.reduce, 1, false, true);
    else
      copy_bytes(out, in, counts[0] * es);
    return;
  }
  const bool stream = counts[me] * out_es >= stream_threshold_;
  const size_t steps = (longest + pe - 1) / pe;
  for (size_t k = 0; k < steps; ++k) {
    uint64_t e = ++epoch_;
    stage_pieces(e, in, counts.data(), displs.data(), k, pe, es);
    barrier(e, ctx);
    size_t len = clamp_len(counts[me], k * pe, pe);
    if (len) {
      for (int r = 0; r < n_; ++r)
        srcs_[r] = r == rank_ ? in + (displs[me] + k * pe) * es : staging(r, e) + me * piece_;
      reduce_sources(out + k * pe * out_es, srcs_.data(), n_, len, op.dtype, op.reduce, n_, stream, widen);
    }
  }
  if (stream) store_fence();
}

// ---- all-to-all(v): piece k of every outgoing block per step ----

uint64_t ShmBackend::allreduce_max(uint64_t value, const OpContext& ctx) {
  uint64_t e = ++epoch_;
  std::memcpy(inline_payload(rank_, e), &value, sizeof(value));
  barrier(e, ctx);
  uint64_t best = 0;
  for (int r = 0; r < n_; ++r) {
    uint64_t v;
    std::memcpy(&v, inline_payload(r, e), sizeof(v));
    best = std::max(best, v);
  }
  return best;
}

void ShmBackend::alltoall(const Op& op, const OpContext& ctx) {
  const size_t es = dtype_size(op.dtype), pe = piece_ / es;
  const size_t n = static_cast<size_t>(n_), me = static_cast<size_t>(rank_);
  const bool equal = op.kind == OpKind::kAlltoall;
  std::vector<size_t> sc = equal ? std::vector<size_t>(n, op.count) : op.counts;
  std::vector<size_t> rc = equal ? sc : op.recv_counts;
  std::vector<size_t> sd = displacements(sc), rd = displacements(rc);
  const auto* in = static_cast<const uint8_t*>(op.in);
  auto* out = static_cast<uint8_t*>(op.out);
  // Own block: for in-place (equal blocks only) it is already where it belongs.
  const bool stream = (rd.back() + rc.back()) * es >= stream_threshold_;
  if (in != out) copy_bytes(out + rd[me] * es, in + sd[me] * es, std::min(sc[me], rc[me]) * es, stream);
  if (n_ == 1) return;
  size_t longest = 0;
  for (size_t d = 0; d < n; ++d)
    if (d != me) longest = std::max({longest, sc[d], rc[d]});
  // Every rank must run the same number of steps: agree on the largest block.
  if (!equal) longest = allreduce_max(longest, ctx);
  if (longest == 0) return;
  const size_t steps = (longest + pe - 1) / pe;
  for (size_t k = 0; k < steps; ++k) {
    uint64_t e = ++epoch_;
    stage_pieces(e, in, sc.data(), sd.data(), k, pe, es);
    barrier(e, ctx);
    for (size_t s = 0; s < n; ++s) {
      size_t len = clamp_len(rc[s], k * pe, pe);
      if (s != me && len)
        copy_bytes(out + (rd[s] + k * pe) * es, staging(static_cast<int>(s), e) + me * piece_, len * es, stream);
    }
  }
  if (stream) store_fence();
}

}  // namespace distllm::comm
