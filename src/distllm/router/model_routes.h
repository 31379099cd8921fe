// Which model a request goes to: the request's `model`, or, when that name is an
// alias with a weighted split (A/B test, canary), one of the alias's targets.
//
//   --split chat=gpt2-v1:90,gpt2-v2:10      90% of "chat" requests to gpt2-v1
//
// or the same in the router's JSON config file:
//
//   {"splits": {"chat": {"gpt2-v1": 90, "gpt2-v2": 10}}}
//
// A request that carries a session key (X-Session-Id or `user`) always lands on the
// same target, so one user sees one arm of an experiment; keyless requests draw at
// random with the weights. The router rewrites `model` to the chosen target before
// forwarding, and lists aliases next to the replicas' models in /v1/models.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace distllm::router {

struct WeightedTarget {
  std::string model;
  double weight = 0;  // > 0; weights need not sum to 100
};

// alias -> its targets.
using Splits = std::map<std::string, std::vector<WeightedTarget>>;

// Adds "alias=target:weight,target:weight" to `splits`. Throws distllm::Error naming
// what is wrong (also for an alias given twice or a weight that is not positive).
void add_split_flag(Splits& splits, const std::string& spec);
// Adds the "splits" object of a config file (see above). Throws distllm::Error.
void add_splits_json(Splits& splits, const nlohmann::ordered_json& json);
void add_split(Splits& splits, const std::string& alias, std::vector<WeightedTarget> targets);

class ModelRoutes {
 public:
  explicit ModelRoutes(Splits splits);

  bool is_alias(const std::string& model) const { return splits_.count(model) > 0; }
  // The model to forward to: `model` itself unless it is an alias.
  std::string resolve(const std::string& model, const std::string& session_key);
  // The aliases as /v1/models entries.
  nlohmann::ordered_json alias_entries() const;

 private:
  const Splits splits_;
  std::mutex mu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

// Picks a target by weight from u in [0, 1).
const std::string& pick_weighted(const std::vector<WeightedTarget>& targets, double u);

}  // namespace distllm::router
