#include "distllm/router/policy.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm::router {
namespace {

uint64_t fnv1a(const char* data, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  return h;
}

// splitmix64's finaliser: spreads FNV's clustered values over the whole ring.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int least_loaded(std::span<const ReplicaLoad> a) {
  const ReplicaLoad* best = &a[0];
  for (const ReplicaLoad& r : a)
    if (r.outstanding + r.queued < best->outstanding + best->queued) best = &r;
  return best->index;
}

class RoundRobin : public RoutingPolicy {
 public:
  int pick(const RouteKey&, std::span<const ReplicaLoad> a) override {
    return a[next_.fetch_add(1) % a.size()].index;
  }
  const char* name() const override { return "round_robin"; }

 private:
  std::atomic<uint64_t> next_{0};
};

class LeastOutstanding : public RoutingPolicy {
 public:
  int pick(const RouteKey&, std::span<const ReplicaLoad> a) override { return least_loaded(a); }
  const char* name() const override { return "least_outstanding"; }
};

class PowerOfTwo : public RoutingPolicy {
 public:
  int pick(const RouteKey&, std::span<const ReplicaLoad> a) override {
    if (a.size() == 1) return a[0].index;
    std::lock_guard<std::mutex> lock(mu_);
    const size_t i = rng_() % a.size();
    size_t j = rng_() % (a.size() - 1);
    if (j >= i) ++j;
    const ReplicaLoad& x = a[i];
    const ReplicaLoad& y = a[j];
    return x.outstanding + x.queued <= y.outstanding + y.queued ? x.index : y.index;
  }
  const char* name() const override { return "power_of_two"; }

 private:
  std::mutex mu_;
  std::mt19937_64 rng_{12345};
};

// A ring of 64 virtual nodes per replica; a key goes to the first available
// replica clockwise from its hash, so removing one replica moves only its keys.
class ConsistentHash : public RoutingPolicy {
 public:
  explicit ConsistentHash(int n) {
    for (int r = 0; r < n; ++r)
      for (int v = 0; v < 64; ++v) {
        const std::string node = strprintf("replica-%d-%d", r, v);
        ring_.emplace(mix(fnv1a(node.data(), node.size())), r);
      }
  }
  int pick(const RouteKey& key, std::span<const ReplicaLoad> a) override {
    if (key.session.empty()) return least_loaded(a);
    auto available = [&](int r) {
      for (const ReplicaLoad& l : a)
        if (l.index == r) return true;
      return false;
    };
    auto it = ring_.lower_bound(key_hash(key.session));
    for (size_t step = 0; step < ring_.size(); ++step, ++it) {
      if (it == ring_.end()) it = ring_.begin();
      if (available(it->second)) return it->second;
    }
    return least_loaded(a);
  }
  const char* name() const override { return "consistent_hash"; }

 private:
  std::multimap<uint64_t, int> ring_;
};

class CacheAware : public RoutingPolicy {
 public:
  int pick(const RouteKey& key, std::span<const ReplicaLoad> a) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t lo = a[0].outstanding + a[0].queued, hi = lo;
    for (const ReplicaLoad& r : a) {
      lo = std::min(lo, r.outstanding + r.queued);
      hi = std::max(hi, r.outstanding + r.queued);
    }
    int chosen = -1;
    // SGLang's rule: balanced enough (the busiest has at most kImbalance more in
    // flight than the idlest, or at most 1.5x) -> follow the cache.
    if (hi - lo <= kImbalance || static_cast<double>(hi) <= 1.5 * static_cast<double>(lo)) {
      size_t best = 0;
      for (const ReplicaLoad& r : a) {
        const size_t m = index_.match(r.index, key.prompt);
        if (m > best || (m == best && chosen >= 0 && m > 0 && r.outstanding < load_of(a, chosen))) {
          best = m;
          chosen = r.index;
        }
      }
    }
    // No replica holds any of it: the least loaded (ties: the first). SGLang
    // sends such a prompt to the replica whose tree is smallest; tried here as the
    // tie-break (always, and only when every replica is idle), it cost most of
    // cache-aware's gain on bench/route_cache_aware.sh (1.25x and 1.28x round
    // robin's throughput against 1.51x), so it is not used.
    if (chosen < 0) chosen = least_loaded(a);
    index_.insert(chosen, key.prompt);
    return chosen;
  }
  const char* name() const override { return "cache_aware"; }

 private:
  static constexpr int64_t kImbalance = 4;
  static int64_t load_of(std::span<const ReplicaLoad> a, int index) {
    for (const ReplicaLoad& r : a)
      if (r.index == index) return r.outstanding;
    return 0;
  }
  std::mutex mu_;
  PrefixIndex index_;
};

}  // namespace

uint64_t key_hash(std::string_view key) { return mix(fnv1a(key.data(), key.size())); }

size_t PrefixIndex::match(int replica, const std::string& prompt) const {
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return 0;
  size_t matched = 0;
  uint64_t h = 1469598103934665603ull;
  for (size_t end = kBlock; end <= prompt.size(); end += kBlock) {
    h = fnv1a(prompt.data() + end - kBlock, kBlock, h);
    if (!it->second.last_use.count(h)) break;
    matched = end;
  }
  return matched;
}

void PrefixIndex::insert(int replica, const std::string& prompt) {
  Replica& r = replicas_[replica];
  uint64_t h = 1469598103934665603ull;
  for (size_t end = kBlock; end <= prompt.size(); end += kBlock) {
    h = fnv1a(prompt.data() + end - kBlock, kBlock, h);
    r.last_use[h] = ++r.tick;
  }
  if (r.last_use.size() > max_entries_) {
    // Drop the oldest half: an approximate LRU, amortised over many inserts.
    std::vector<uint64_t> ticks;
    ticks.reserve(r.last_use.size());
    for (const auto& [hash, t] : r.last_use) ticks.push_back(t);
    std::nth_element(ticks.begin(), ticks.begin() + static_cast<std::ptrdiff_t>(ticks.size() / 2), ticks.end());
    const uint64_t cut = ticks[ticks.size() / 2];
    for (auto e = r.last_use.begin(); e != r.last_use.end();) e = e->second < cut ? r.last_use.erase(e) : std::next(e);
  }
}

std::unique_ptr<RoutingPolicy> make_policy(const std::string& name, int num_replicas) {
  if (name == "round_robin") return std::make_unique<RoundRobin>();
  if (name == "least_outstanding") return std::make_unique<LeastOutstanding>();
  if (name == "power_of_two") return std::make_unique<PowerOfTwo>();
  if (name == "consistent_hash") return std::make_unique<ConsistentHash>(num_replicas);
  if (name == "cache_aware") return std::make_unique<CacheAware>();
  throw_error(strprintf("unknown --policy '%s' (round_robin, least_outstanding, power_of_two, consistent_hash, "
                        "cache_aware)",
                        name.c_str()));
}

}  // namespace distllm::router
