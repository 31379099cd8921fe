// Finds Debian's python3 with torch and runs the PyTorch reference scripts in
// tests/reference. A missing torch fails the test (tests/reference_policy.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "reference_policy.h"

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

// Runs tests/reference/<script> with args; returns the exit status.
inline int run_reference(const std::string& script, const std::string& args) {
  std::string cmd = "OMP_NUM_THREADS=1 " + torch_python() + " " + DISTLLM_SOURCE_DIR + "/tests/reference/" + script +
                    " " + args;
  return std::system(cmd.c_str());
}

}  // namespace distllm::testing

#define DISTLLM_SKIP_WITHOUT_TORCH() DISTLLM_REQUIRE_REFERENCE(::distllm::testing::torch_available(), "python3-torch")
