// Opt-in wall-clock accounting by named region, for per-kernel time breakdowns
// (`distllm bench train --breakdown`). Disabled, a scope costs one relaxed load.
#pragma once

#include <string>
#include <vector>

namespace distllm {

struct ProfileEntry {
  std::string name;
  double seconds = 0;
  long long calls = 0;
};

class Profiler {
 public:
  static bool enabled();
  static void set_enabled(bool on);
  static void reset();
  static void add(const char* name, double seconds);
  // Entries sorted by total time, largest first.
  static std::vector<ProfileEntry> snapshot();
};

class ProfileScope {
 public:
  explicit ProfileScope(const char* name);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* name_;
  double start_ = 0;
};

}  // namespace distllm

#define DISTLLM_PROFILE_CAT2(a, b) a##b
#define DISTLLM_PROFILE_CAT(a, b) DISTLLM_PROFILE_CAT2(a, b)
#define DL_PROFILE(name) ::distllm::ProfileScope DISTLLM_PROFILE_CAT(profile_scope_, __LINE__)(name)
