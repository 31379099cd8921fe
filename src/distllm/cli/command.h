// Subcommand registry. A file such as train.cpp registers "train"; bench_comm.cpp
// registers "bench comm". main.cpp dispatches on the first one or two words.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "distllm/cli/args.h"

namespace distllm {

struct Command {
  std::string name;     // "train" or "bench comm"
  std::string summary;  // one line for `distllm --help`
  std::function<int(Args&)> run;
};

std::map<std::string, Command>& command_registry();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string summary, std::function<int(Args&)> run) {
    Command c{name, std::move(summary), std::move(run)};
    command_registry()[name] = std::move(c);
  }
};

// Applies --threads (default: the CPUs this process may use) to kernels and BLAS.
void apply_thread_flag(Args& args);

}  // namespace distllm

#define DISTLLM_COMMAND_CAT2(a, b) a##b
#define DISTLLM_COMMAND_CAT(a, b) DISTLLM_COMMAND_CAT2(a, b)
#define DISTLLM_REGISTER_COMMAND(name, summary, fn) \
  static ::distllm::RegisterCommand DISTLLM_COMMAND_CAT(distllm_command_, __LINE__)(name, summary, fn)
