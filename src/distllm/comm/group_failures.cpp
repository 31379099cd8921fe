// ProcessGroup's failure reports: a timed-out operation's report (which peers never
// arrived, which are inside it too, which do not answer), and debug mode's check
// that every rank called the same collective with the same arguments.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/comm/diag.h"
#include "distllm/comm/errors.h"
#include "distllm/comm/group_internal.h"

namespace distllm::comm {

namespace {

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

}  // namespace distllm::comm
