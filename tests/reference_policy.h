// References (PyTorch, Node and the npm packages) are required by default: a test
// whose reference is missing fails, so CI can never pass by skipping. A developer
// without them sets DISTLLM_ALLOW_MISSING_REFERENCES=1 to skip those tests instead
// (see tests/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace distllm::testing {

inline bool missing_references_allowed() {
  const char* env = std::getenv("DISTLLM_ALLOW_MISSING_REFERENCES");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace distllm::testing

// Use inside a TEST or SetUp: fails (or, when allowed, skips) unless `available`.
#define DISTLLM_REQUIRE_REFERENCE(available, what)                                                        \
  do {                                                                                                    \
    if (!(available)) {                                                                                   \
      if (!::distllm::testing::missing_references_allowed())                                              \
        FAIL() << what << " is required (install it with scripts/setup.sh, or set "                       \
                          "DISTLLM_ALLOW_MISSING_REFERENCES=1 to skip)";                                  \
      GTEST_SKIP() << what << " is missing; skipped (DISTLLM_ALLOW_MISSING_REFERENCES=1)";               \
    }                                                                                                     \
  } while (0)
