// The fixed clock chat template tests give strftime_now, the same one the references
// use (make_expected.py, hf_jinja_reference.mjs): 2025-03-04 09:26:53, a Tuesday.
#pragma once

#include <ctime>

namespace distllm::serve::testing {

inline std::tm chat_template_test_clock() {
  std::tm t{};
  t.tm_year = 2025 - 1900;
  t.tm_mon = 2;
  t.tm_mday = 4;
  t.tm_hour = 9;
  t.tm_min = 26;
  t.tm_sec = 53;
  t.tm_wday = 2;
  t.tm_yday = 62;
  return t;
}

}  // namespace distllm::serve::testing
