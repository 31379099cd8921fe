#include "distllm/base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace distllm {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("DISTLLM_LOG");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }

void log_message(LogLevel level, const std::string& message) {
  static std::mutex mu;
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[%s] %s\n", names[static_cast<int>(level)], message.c_str());
}

}  // namespace distllm
