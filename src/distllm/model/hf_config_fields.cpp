#include "distllm/model/hf_config_fields.h"

#include <cstdint>

#include "distllm/base/error.h"

namespace distllm::hf_config {

const nlohmann::json& require(const nlohmann::json& j, const char* key, const std::string& origin) {
  auto it = j.find(key);
  DL_CHECK(it != j.end() && !it->is_null(), "%s: missing required key '%s'", origin.c_str(), key);
  return *it;
}

int get_int(const nlohmann::json& j, const char* key, int max, const std::string& origin) {
  const auto& v = require(j, key, origin);
  DL_CHECK(v.is_number_integer(), "%s: '%s' must be an integer", origin.c_str(), key);
  DL_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(max), "%s: '%s' = %s is larger than the "
           "supported maximum %d", origin.c_str(), key, v.dump().c_str(), max);
  int64_t x = v.get<int64_t>();
  DL_CHECK(x > 0, "%s: '%s' must be positive, got %lld", origin.c_str(), key, (long long)x);
  DL_CHECK(x <= max, "%s: '%s' = %lld is larger than the supported maximum %d", origin.c_str(), key, (long long)x,
           max);
  return static_cast<int>(x);
}

int get_int_or(const nlohmann::json& j, const char* key, int fallback, int max, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return get_int(j, key, max, origin);
}

double get_number_or(const nlohmann::json& j, const char* key, double fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DL_CHECK(it->is_number(), "%s: '%s' must be a number", origin.c_str(), key);
  return it->get<double>();
}

bool get_bool_or(const nlohmann::json& j, const char* key, bool fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DL_CHECK(it->is_boolean(), "%s: '%s' must be true or false", origin.c_str(), key);
  return it->get<bool>();
}

std::string get_string_or(const nlohmann::json& j, const char* key, const std::string& fallback,
                          const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DL_CHECK(it->is_string(), "%s: '%s' must be a string", origin.c_str(), key);
  return it->get<std::string>();
}

}  // namespace distllm::hf_config
