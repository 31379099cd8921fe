// The API key of a server or router: which paths it guards and the one check of a
// request's "Authorization: Bearer <key>" header, in constant time (the time a
// wrong key takes to be refused says nothing about how much of it was right).
//
// /v1/, /admin/ and /internal/ need the key; /health and /metrics stay open (load
// balancers and Prometheus scrape them without one). Without a key everything is
// open. The front checks it on the head (edge.h), before a byte of the body is read.
#pragma once

#include <string>
#include <string_view>

namespace distllm::http {

// Equal strings, compared in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

class ApiKeyCheck {
 public:
  explicit ApiKeyCheck(std::string key = "") : key_(std::move(key)), expected_("Bearer " + key_) {}

  bool enabled() const { return !key_.empty(); }
  // Whether `path` (no query) needs the key.
  static bool guards(std::string_view path);
  // Whether a request for `path` with this Authorization header value may pass.
  bool allows(std::string_view path, std::string_view authorization) const;
  // The header value a client sends ("Bearer <key>").
  const std::string& header_value() const { return expected_; }

 private:
  std::string key_;
  std::string expected_;
};

// The message of the 401 a request without the right key gets.
inline constexpr const char* kBadKeyMessage = "Incorrect or missing API key: send 'Authorization: Bearer <key>'.";

}  // namespace distllm::http
