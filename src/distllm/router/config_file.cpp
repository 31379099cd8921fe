#include "distllm/router/config_file.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"

namespace distllm::router {

void apply_config_file(const std::string& path, RouterConfig& config) {
  std::ifstream in(path);
  DL_CHECK(in.good(), "--config %s: cannot open it", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  const auto json = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  DL_CHECK(!json.is_discarded() && json.is_object(), "--config %s: not a JSON object", path.c_str());
  for (const auto& [key, value] : json.items()) {
    if (key == "replicas") {
      DL_CHECK(value.is_array(), "--config %s: \"replicas\" must be an array of URLs", path.c_str());
      for (const auto& url : value) {
        DL_CHECK(url.is_string(), "--config %s: every replica must be a URL string", path.c_str());
        config.replicas.push_back(url.get<std::string>());
      }
    } else if (key == "policy") {
      DL_CHECK(value.is_string(), "--config %s: \"policy\" must be a string", path.c_str());
      config.policy = value.get<std::string>();
    } else if (key == "splits") {
      try {
        add_splits_json(config.splits, value);
      } catch (const Error& e) {
        throw Error("--config " + path + ": " + e.what());
      }
    } else {
      throw Error("--config " + path + ": unknown key \"" + key + "\" (known: replicas, policy, splits)");
    }
  }
}

}  // namespace distllm::router
