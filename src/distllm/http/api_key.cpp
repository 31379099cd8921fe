#include "distllm/http/api_key.h"

namespace distllm::http {

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool ApiKeyCheck::guards(std::string_view path) {
  return path.rfind("/v1/", 0) == 0 || path.rfind("/admin/", 0) == 0 || path.rfind("/internal/", 0) == 0;
}

bool ApiKeyCheck::allows(std::string_view path, std::string_view authorization) const {
  if (!enabled() || !guards(path)) return true;
  return constant_time_equal(authorization, expected_);
}

}  // namespace distllm::http
