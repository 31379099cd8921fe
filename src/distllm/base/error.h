// Errors: one exception type carrying a message that names what is wrong.
//
// distllm reports bad input (config values, files, requests) by throwing
// distllm::Error; the CLI turns it into "error: <message>" and a non-zero exit,
// servers turn it into an HTTP 4xx. Internal invariants use DL_ASSERT.
#pragma once

#include <stdexcept>
#include <string>

#include "distllm/base/strings.h"

namespace distllm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void throw_error(const std::string& message);

}  // namespace distllm

// DL_CHECK(cond, fmt, ...): throws distllm::Error with a printf-style message.
#define DL_CHECK(cond, ...)                                   \
  do {                                                        \
    if (!(cond)) ::distllm::throw_error(::distllm::strprintf(__VA_ARGS__)); \
  } while (0)

// DL_ASSERT(cond): a broken internal invariant (a bug, not bad input).
#define DL_ASSERT(cond)                                                         \
  do {                                                                          \
    if (!(cond))                                                                \
      ::distllm::throw_error(::distllm::strprintf("internal error: %s at %s:%d", \
                                                  #cond, __FILE__, __LINE__)); \
  } while (0)
