// Routing policies: which replica gets a request.
//
//   round_robin         each available replica in turn
//   least_outstanding   fewest requests in flight (ties: lowest index)
//   power_of_two        the less loaded of two random available replicas
//   consistent_hash     a session/user key always lands on the same replica (a hash
//                       ring with virtual nodes; keyless requests fall back to
//                       least_outstanding)
//   cache_aware         SGLang's idea: the replica whose earlier prompts share the
//                       longest prefix with this one (its prefix cache likely holds
//                       it), unless the load is imbalanced, then the least loaded
//
// A policy sees only the available replicas' loads; the replica set decides
// availability (health, circuit breaker, drain).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace distllm::router {

struct ReplicaLoad {
  int index = 0;            // in the replica set
  int64_t outstanding = 0;  // requests this router has in flight there
  int64_t queued = 0;       // the replica's own queue length (scraped from /metrics)
};

struct RouteKey {
  std::string prompt;   // the prompt text (messages concatenated for chat)
  std::string session;  // X-Session-Id header, or the request's "user" field
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  // `available` is non-empty. Returns the chosen replica's index.
  virtual int pick(const RouteKey& key, std::span<const ReplicaLoad> available) = 0;
  virtual const char* name() const = 0;
};

// A well-spread 64-bit hash of a routing key (session ids, split stickiness).
uint64_t key_hash(std::string_view key);

// "round_robin", "least_outstanding", "power_of_two", "consistent_hash",
// "cache_aware"; throws distllm::Error naming the value otherwise.
std::unique_ptr<RoutingPolicy> make_policy(const std::string& name, int num_replicas);

// The cache-aware policy's approximate per-replica prefix index, exposed for tests:
// prompts are cut into 64-byte blocks and each replica remembers the hashes of the
// prefixes (ending at a block boundary) it was sent, up to a bound (oldest dropped).
class PrefixIndex {
 public:
  static constexpr size_t kBlock = 64;
  explicit PrefixIndex(size_t max_entries_per_replica = 1 << 16) : max_entries_(max_entries_per_replica) {}
  // Bytes of `prompt` (a multiple of kBlock) the replica has already been sent.
  size_t match(int replica, const std::string& prompt) const;
  void insert(int replica, const std::string& prompt);

 private:
  struct Replica {
    std::unordered_map<uint64_t, uint64_t> last_use;  // prefix hash -> insertion tick
    uint64_t tick = 0;
  };
  size_t max_entries_;
  std::unordered_map<int, Replica> replicas_;
};

}  // namespace distllm::router
