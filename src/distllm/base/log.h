// Minimal leveled logging to stderr. Set DISTLLM_LOG=debug|info|warn|error.
#pragma once

#include <string>

#include "distllm/base/strings.h"

namespace distllm {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& message);

}  // namespace distllm

#define DL_LOG(level, ...)                                                   \
  do {                                                                       \
    if (::distllm::LogLevel::level >= ::distllm::log_level())                \
      ::distllm::log_message(::distllm::LogLevel::level, ::distllm::strprintf(__VA_ARGS__)); \
  } while (0)
#define LOG_DEBUG(...) DL_LOG(kDebug, __VA_ARGS__)
#define LOG_INFO(...) DL_LOG(kInfo, __VA_ARGS__)
#define LOG_WARN(...) DL_LOG(kWarn, __VA_ARGS__)
#define LOG_ERROR(...) DL_LOG(kError, __VA_ARGS__)
