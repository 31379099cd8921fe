#include "distllm/router/model_routes.h"

#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/router/policy.h"

namespace distllm::router {

const std::string& pick_weighted(const std::vector<WeightedTarget>& targets, double u) {
  double total = 0;
  for (const auto& t : targets) total += t.weight;
  double x = u * total;
  for (const auto& t : targets) {
    if (x < t.weight) return t.model;
    x -= t.weight;
  }
  return targets.back().model;  // u * total rounded up to total
}

void add_split(Splits& splits, const std::string& alias, std::vector<WeightedTarget> targets) {
  DL_CHECK(!alias.empty(), "--split: the alias name is empty");
  DL_CHECK(!targets.empty(), "--split %s: no targets", alias.c_str());
  DL_CHECK(splits.count(alias) == 0, "--split %s is given twice", alias.c_str());
  for (const auto& t : targets) {
    DL_CHECK(!t.model.empty(), "--split %s: a target's model name is empty", alias.c_str());
    DL_CHECK(t.model != alias, "--split %s: an alias cannot name itself as a target", alias.c_str());
    DL_CHECK(std::isfinite(t.weight) && t.weight > 0, "--split %s: the weight of %s must be a positive number",
             alias.c_str(), t.model.c_str());
  }
  splits[alias] = std::move(targets);
}

void add_split_flag(Splits& splits, const std::string& spec) {
  const size_t eq = spec.find('=');
  DL_CHECK(eq != std::string::npos, "--split '%s' must look like alias=model:weight,model:weight", spec.c_str());
  std::vector<WeightedTarget> targets;
  for (const std::string& part : split(spec.substr(eq + 1), ',')) {
    const size_t colon = part.rfind(':');
    DL_CHECK(colon != std::string::npos, "--split '%s': target '%s' needs a weight (model:weight)", spec.c_str(),
             part.c_str());
    WeightedTarget t;
    t.model = part.substr(0, colon);
    const std::string w = part.substr(colon + 1);
    char* end = nullptr;
    t.weight = std::strtod(w.c_str(), &end);
    DL_CHECK(!w.empty() && end && *end == '\0', "--split '%s': weight '%s' is not a number", spec.c_str(), w.c_str());
    targets.push_back(std::move(t));
  }
  add_split(splits, spec.substr(0, eq), std::move(targets));
}

void add_splits_json(Splits& out, const nlohmann::ordered_json& splits) {
  DL_CHECK(splits.is_object(), "router config: \"splits\" must be an object of alias -> {model: weight}");
  for (const auto& [alias, targets] : splits.items()) {
    DL_CHECK(targets.is_object(), "router config: splits.%s must be an object of model -> weight", alias.c_str());
    std::vector<WeightedTarget> list;
    for (const auto& [model, weight] : targets.items()) {
      DL_CHECK(weight.is_number(), "router config: splits.%s.%s must be a number", alias.c_str(), model.c_str());
      list.push_back({model, weight.get<double>()});
    }
    add_split(out, alias, std::move(list));
  }
}

ModelRoutes::ModelRoutes(Splits splits) : splits_(std::move(splits)) {}

std::string ModelRoutes::resolve(const std::string& model, const std::string& session_key) {
  auto it = splits_.find(model);
  if (it == splits_.end()) return model;
  double u;
  if (!session_key.empty()) {
    // Salted with the alias, so one user's arms in two experiments are independent.
    u = static_cast<double>(key_hash(model + '\n' + session_key) >> 11) * 0x1.0p-53;
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }
  return pick_weighted(it->second, u);
}

nlohmann::ordered_json ModelRoutes::alias_entries() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [alias, targets] : splits_) {
    nlohmann::ordered_json split = nlohmann::ordered_json::object();
    for (const auto& t : targets) split[t.model] = t.weight;
    out.push_back({{"id", alias}, {"object", "model"}, {"owned_by", "distllm-router"}, {"split", split}});
  }
  return out;
}

}  // namespace distllm::router
