// Finds Debian's python3 with torch and runs the PyTorch reference scripts in
// tests/reference. Tests skip when torch is absent, unless DISTLLM_REQUIRE_TORCH=1
// (set by scripts/test.sh, so CI can never pass by skipping).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace distllm::testing {

inline std::string torch_python() {
  const char* env = std::getenv("DISTLLM_PYTHON");
  return env ? env : "/usr/bin/python3";
}

inline bool torch_available() {
  static const bool ok = [] {
    std::string cmd = torch_python() + " -c 'import torch, numpy' >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }();
  return ok;
}

inline bool torch_required() {
  const char* env = std::getenv("DISTLLM_REQUIRE_TORCH");
  return env != nullptr && std::string(env) == "1";
}

// Runs tests/reference/<script> with args; returns the exit status.
inline int run_reference(const std::string& script, const std::string& args) {
  std::string cmd = "OMP_NUM_THREADS=1 " + torch_python() + " " + DISTLLM_SOURCE_DIR + "/tests/reference/" + script +
                    " " + args;
  return std::system(cmd.c_str());
}

}  // namespace distllm::testing

#define DISTLLM_SKIP_WITHOUT_TORCH()                                                    \
  do {                                                                                  \
    if (!::distllm::testing::torch_available()) {                                       \
      if (::distllm::testing::torch_required()) FAIL() << "python3-torch is required";  \
      GTEST_SKIP() << "python3 with torch not found; parity test skipped";              \
    }                                                                                   \
  } while (0)
