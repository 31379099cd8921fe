// Every collective x dtype x reduce op x size on every backend, against a plain
// reference computed locally from the same deterministic inputs.
#include <numeric>

#include "comm_test_util.h"

namespace distllm::comm::test {

Backends& Backends::get() {
  static Backends b = [] {
    Backends out;
    auto make = [&](const std::string& label, const std::string& backend, size_t chunk, int fake_hosts) {
      GroupOptions o;
      o.backend = backend;
      o.timeout_s = kTestTimeout;
      o.shm_chunk_bytes = chunk;
      o.test_only_ranks_per_host = fake_hosts;
      o.name = label;
      std::vector<int> all(static_cast<size_t>(world()->size()));
      std::iota(all.begin(), all.end(), 0);
      out.groups.emplace_back(label, new_group(all, o));
    };
    make("mpi", "mpi", 0, 0);
    make("shm", "shm", 0, 0);
    // A 4 KiB chunk makes modest messages run many pipeline steps (and the
    // two-phase all-reduce with 3+ ranks).
    make("shm4k", "shm", 4096, 0);
    // TEST ONLY fake hosts: 2 ranks per "host" (2x2 with 4 ranks, 2+1 with 3), and
    // one rank per host (inter-host level only).
    make("hier2", "hierarchical", 4096, 2);
    make("hier1", "hierarchical", 0, 1);
    return out;
  }();
  return b;
}

namespace {

ProcessGroupPtr group_for(const std::string& label) {
  for (auto& [name, g] : Backends::get().groups)
    if (name == label) return g;
  throw std::runtime_error("no backend " + label);
}

class Collectives : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    pg = group_for(GetParam());
    n = pg->size();
    me = pg->rank();
  }
  ProcessGroupPtr pg;
  int n = 1, me = 0;

  // A size that is odd and not divisible by the group size.
  size_t awkward() const { return static_cast<size_t>(13 * n + 5); }
  Buf input(int rank, DType t, ReduceOp op, size_t count, uint64_t salt = 0) const {
    Buf b(t, count);
    for (size_t i = 0; i < count; ++i) b.set(i, pattern(rank, i, t, op, salt));
    return b;
  }
  // Reduction over ranks of element `i` of each rank's input at offset `base`.
  double reduced(size_t i, DType t, ReduceOp op, uint64_t salt = 0) const {
    double vals[64] = {};
    for (int r = 0; r < n; ++r) vals[r] = pattern(r, i, t, op, salt);
    return reference(vals, n, t, op);
  }
};

std::string label(DType t, ReduceOp op, size_t count, bool in_place) {
  return std::string(dtype_short_name(t)) + "/" + reduce_op_name(op) + "/n=" + std::to_string(count) +
         (in_place ? "/in-place" : "");
}

TEST_P(Collectives, Allreduce) {
  for (DType t : kCollectiveDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, awkward(), size_t{3001}}) {
        Buf want(t, count);
        for (size_t i = 0; i < count; ++i) want.set(i, reduced(i, t, op));
        Buf in = input(me, t, op, count), out(t, count);
        pg->allreduce(in.data(), out.data(), count, t, op);
        ASSERT_TRUE(same(out, want, count, label(t, op, count, false)));
        ASSERT_TRUE(same(in, input(me, t, op, count), count, "input untouched"));
        pg->allreduce(in.data(), count, t, op);
        ASSERT_TRUE(same(in, want, count, label(t, op, count, true)));
      }
    }
  }
}

TEST_P(Collectives, AllreduceSeveralMegabytes) {
  struct Case {
    DType t;
    ReduceOp op;
    size_t count;
  };
  for (Case c : {Case{DType::kF32, ReduceOp::kSum, (3u << 20) / 4 + 3}, Case{DType::kBF16, ReduceOp::kAvg, 1u << 20},
                 Case{DType::kI32, ReduceOp::kMax, (1u << 20) + 1}}) {
    Buf want(c.t, c.count);
    for (size_t i = 0; i < c.count; ++i) want.set(i, reduced(i, c.t, c.op));
    Buf in = input(me, c.t, c.op, c.count), out(c.t, c.count);
    pg->allreduce(in.data(), out.data(), c.count, c.t, c.op);
    ASSERT_TRUE(same(out, want, c.count, label(c.t, c.op, c.count, false)));
    pg->allreduce(in.data(), c.count, c.t, c.op);
    ASSERT_TRUE(same(in, want, c.count, label(c.t, c.op, c.count, true)));
  }
}

// Arbitrary floats: results within rounding of the exact sum, and bit-identical on
// every rank (replicas of a model must not drift apart).
TEST_P(Collectives, AllreduceRandomFloatsIdenticalEverywhere) {
  const size_t count = 100003;
  std::vector<float> x(count), out(count);
  CounterRng rng(42, static_cast<uint64_t>(me));
  for (float& v : x) v = rng.normal();
  pg->allreduce(x.data(), out.data(), count, DType::kF32, ReduceOp::kSum);
  for (size_t i = 0; i < count; i += 997) {
    double exact = 0, mag = 0;
    for (int r = 0; r < n; ++r) {
      CounterRng other(42, static_cast<uint64_t>(r), 0);
      other.set_counter(2 * i);  // normal() draws two numbers
      float v = other.normal();
      exact += v;
      mag += std::fabs(v);
    }
    ASSERT_NEAR(out[i], exact, 1e-6 * mag + 1e-7) << i;
  }
  uint64_t h = 0;
  for (float v : out) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h = mix64(h ^ bits);
  }
  std::vector<uint64_t> all(static_cast<size_t>(n));
  world()->allgather(&h, all.data(), 1, DType::kI64);
  for (int r = 0; r < world()->size(); ++r) EXPECT_EQ(all[static_cast<size_t>(r)], h) << "rank " << r;
}

TEST_P(Collectives, Reduce) {
  for (DType t : kCollectiveDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, awkward(), size_t{2500}}) {
        for (int root : {0, n - 1}) {
          Buf in = input(me, t, op, count), out(t, count);
          out.fill(99);
          pg->reduce(in.data(), out.data(), count, t, op, root);
          if (me == root) {
            Buf want(t, count);
            for (size_t i = 0; i < count; ++i) want.set(i, reduced(i, t, op));
            ASSERT_TRUE(same(out, want, count, label(t, op, count, false) + " root " + std::to_string(root)));
            pg->reduce(in.data(), in.data(), count, t, op, root);
            ASSERT_TRUE(same(in, want, count, label(t, op, count, true)));
          } else {
            Buf untouched(t, count);
            untouched.fill(99);
            ASSERT_TRUE(same(out, untouched, count, "non-root output untouched"));
            pg->reduce(in.data(), nullptr, count, t, op, root);
          }
        }
      }
    }
  }
}

TEST_P(Collectives, Broadcast) {
  for (DType t : kCollectiveDTypes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, awkward(), size_t{40000}}) {
      for (int root : {0, n - 1}) {
        Buf want = input(root, t, ReduceOp::kSum, count);
        Buf data = me == root ? input(me, t, ReduceOp::kSum, count) : Buf(t, count);
        pg->broadcast(data.data(), count, t, root);
        ASSERT_TRUE(same(data, want, count, label(t, ReduceOp::kSum, count, true)));
        Buf out(t, count);
        pg->broadcast(me == root ? want.data() : nullptr, out.data(), count, t, root);
        ASSERT_TRUE(same(out, want, count, label(t, ReduceOp::kSum, count, false)));
      }
    }
  }
}

TEST_P(Collectives, Allgather) {
  for (DType t : kCollectiveDTypes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, awkward(), size_t{5000}}) {
      Buf want(t, count * n);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) want.set(r * count + i, pattern(r, i, t, ReduceOp::kSum));
      Buf in = input(me, t, ReduceOp::kSum, count), out(t, count * n);
      pg->allgather(in.data(), out.data(), count, t);
      ASSERT_TRUE(same(out, want, count * n, label(t, ReduceOp::kSum, count, false)));
      Buf inplace(t, count * n);
      for (size_t i = 0; i < count; ++i) inplace.set(me * count + i, in.get(i));
      pg->allgather(inplace.at(me * count), inplace.data(), count, t);
      ASSERT_TRUE(same(inplace, want, count * n, label(t, ReduceOp::kSum, count, true)));
    }
  }
}

std::vector<size_t> uneven_counts(int n, size_t scale) {
  std::vector<size_t> c(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) c[static_cast<size_t>(r)] = static_cast<size_t>((r * 7 + 3) % 5) * scale + (r % 2);
  return c;
}

TEST_P(Collectives, Allgatherv) {
  for (DType t : kCollectiveDTypes) {
    for (size_t scale : {size_t{0}, size_t{1}, size_t{997}}) {
      std::vector<size_t> counts = uneven_counts(n, scale);
      if (scale == 0) std::fill(counts.begin(), counts.end(), 0);
      std::vector<size_t> displs(counts.size(), 0);
      for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
      size_t total = displs.back() + counts.back();
      Buf want(t, total);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < counts[r]; ++i) want.set(displs[r] + i, pattern(r, i, t, ReduceOp::kSum));
      Buf in = input(me, t, ReduceOp::kSum, counts[me]), out(t, total);
      pg->allgatherv(in.data(), out.data(), counts, t);
      ASSERT_TRUE(same(out, want, total, label(t, ReduceOp::kSum, total, false)));
      Buf inplace(t, total);
      for (size_t i = 0; i < counts[me]; ++i) inplace.set(displs[me] + i, in.get(i));
      pg->allgatherv(inplace.at(displs[me]), inplace.data(), counts, t);
      ASSERT_TRUE(same(inplace, want, total, label(t, ReduceOp::kSum, total, true)));
    }
  }
}

TEST_P(Collectives, GatherAndScatter) {
  for (DType t : kCollectiveDTypes) {
    for (size_t count : {size_t{0}, size_t{1}, awkward(), size_t{3000}}) {
      for (int root : {0, n - 1}) {
        Buf want(t, count * n);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) want.set(r * count + i, pattern(r, i, t, ReduceOp::kSum));
        Buf in = input(me, t, ReduceOp::kSum, count), out(t, count * n);
        pg->gather(in.data(), me == root ? out.data() : nullptr, count, t, root);
        if (me == root) {
          ASSERT_TRUE(same(out, want, count * n, "gather " + label(t, ReduceOp::kSum, count, false)));
        }
        // Scatter the gathered blocks back: everyone gets its own input again.
        Buf back(t, count);
        pg->scatter(me == root ? want.data() : nullptr, back.data(), count, t, root);
        ASSERT_TRUE(same(back, in, count, "scatter " + label(t, ReduceOp::kSum, count, false)));
      }
    }
  }
}

TEST_P(Collectives, ReduceScatter) {
  for (DType t : kCollectiveDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1500}}) {
        const size_t total = count * n;
        Buf want(t, count);
        for (size_t i = 0; i < count; ++i) want.set(i, reduced(me * count + i, t, op));
        Buf in = input(me, t, op, total), out(t, count);
        pg->reduce_scatter(in.data(), out.data(), count, t, op);
        ASSERT_TRUE(same(out, want, count, label(t, op, count, false)));
        pg->reduce_scatter(in.data(), in.at(me * count), count, t, op);
        Buf mine(t, count);
        for (size_t i = 0; i < count; ++i) mine.set(i, in.get(me * count + i));
        ASSERT_TRUE(same(mine, want, count, label(t, op, count, true)));
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterV) {
  for (DType t : kCollectiveDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (size_t scale : {size_t{1}, size_t{613}}) {
        std::vector<size_t> counts = uneven_counts(n, scale);
        std::vector<size_t> displs(counts.size(), 0);
        for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
        const size_t total = displs.back() + counts.back();
        Buf want(t, counts[me]);
        for (size_t i = 0; i < counts[me]; ++i) want.set(i, reduced(displs[me] + i, t, op));
        Buf in = input(me, t, op, total), out(t, counts[me]);
        pg->reduce_scatter_v(in.data(), out.data(), counts, t, op);
        ASSERT_TRUE(same(out, want, counts[me], label(t, op, total, false)));
      }
    }
  }
}

TEST_P(Collectives, Alltoall) {
  for (DType t : kCollectiveDTypes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{2000}}) {
      // Block d of rank s's input is pattern(s, d*count + i).
      Buf in = input(me, t, ReduceOp::kSum, count * n), out(t, count * n), want(t, count * n);
      for (int s = 0; s < n; ++s)
        for (size_t i = 0; i < count; ++i) want.set(s * count + i, pattern(s, me * count + i, t, ReduceOp::kSum));
      pg->alltoall(in.data(), out.data(), count, t);
      ASSERT_TRUE(same(out, want, count * n, label(t, ReduceOp::kSum, count, false)));
      pg->alltoall(in.data(), in.data(), count, t);
      ASSERT_TRUE(same(in, want, count * n, label(t, ReduceOp::kSum, count, true)));
    }
  }
}

TEST_P(Collectives, Alltoallv) {
  // Rank s sends (s + 2d) % 4 * scale (+1 if d is odd) elements to rank d.
  auto amount = [](int s, int d, size_t scale) { return static_cast<size_t>((s + 2 * d) % 4) * scale + (d % 2); };
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64, DType::kU8}) {
    for (size_t scale : {size_t{0}, size_t{1}, size_t{1700}}) {
      std::vector<size_t> sc(n), rc(n), sd(n, 0), rd(n, 0);
      for (int d = 0; d < n; ++d) sc[d] = amount(me, d, scale);
      for (int s = 0; s < n; ++s) rc[s] = amount(s, me, scale);
      for (int r = 1; r < n; ++r) {
        sd[r] = sd[r - 1] + sc[r - 1];
        rd[r] = rd[r - 1] + rc[r - 1];
      }
      const size_t sent = sd.back() + sc.back(), got = rd.back() + rc.back();
      Buf in = input(me, t, ReduceOp::kSum, sent), out(t, got), want(t, got);
      for (int s = 0; s < n; ++s) {
        size_t their_displ = 0;  // where rank s's block for me starts in its input
        for (int d = 0; d < me; ++d) their_displ += amount(s, d, scale);
        for (size_t i = 0; i < rc[s]; ++i) want.set(rd[s] + i, pattern(s, their_displ + i, t, ReduceOp::kSum));
      }
      pg->alltoallv(in.data(), sc, out.data(), rc, t);
      ASSERT_TRUE(same(out, want, got, label(t, ReduceOp::kSum, got, false)));
    }
  }
}

TEST_P(Collectives, BarrierAndPointToPoint) {
  for (int i = 0; i < 20; ++i) pg->barrier();
  if (n < 2) return;
  // Ring exchange with batch_p2p: send to the right, receive from the left.
  for (size_t count : {size_t{1}, size_t{100000}}) {
    std::vector<int32_t> mine(count, me), from_left(count, -1);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    P2POp ops[2] = {{P2POp::Kind::kSend, mine.data(), count, DType::kI32, right, 5},
                    {P2POp::Kind::kRecv, from_left.data(), count, DType::kI32, left, 5}};
    pg->batch_p2p(ops);
    EXPECT_EQ(from_left.front(), left);
    EXPECT_EQ(from_left.back(), left);
  }
  // Plain send/recv between pairs (even ranks send first).
  if (me % 2 == 0 && me + 1 < n) {
    double x = 3.5 + me;
    pg->send(&x, 1, DType::kF64, me + 1, 9);
    pg->recv(&x, 1, DType::kF64, me + 1, 9);
    EXPECT_EQ(x, 10.0 * (me + 1));
  } else if (me % 2 == 1) {
    double x = 0;
    pg->recv(&x, 1, DType::kF64, me - 1, 9);
    EXPECT_EQ(x, 3.5 + me - 1);
    x = 10.0 * me;
    pg->send(&x, 1, DType::kF64, me - 1, 9);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::Values("mpi", "shm", "shm4k", "hier2", "hier1"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace distllm::comm::test
