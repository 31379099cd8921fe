// distllm: one binary, many subcommands (see command.h).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "distllm/cli/command.h"
#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm {

std::map<std::string, Command>& command_registry() {
  static std::map<std::string, Command> registry;
  return registry;
}

void apply_thread_flag(Args& args) {
  int64_t threads = args.get_int("threads", available_cpus(), "threads for kernels and BLAS");
  DL_CHECK(threads >= 1 && threads <= 1024, "--threads must be in [1, 1024], got %lld", (long long)threads);
  set_num_threads(static_cast<int>(threads));
}

namespace {

void print_help() {
  std::printf("distllm — train and serve decoder-only language models\n\nusage: distllm <command> [flags]\n\n");
  for (const auto& [name, cmd] : command_registry()) std::printf("  %-20s %s\n", name.c_str(), cmd.summary.c_str());
  std::printf("\n`distllm <command> --help` lists a command's flags.\n");
}

}  // namespace
}  // namespace distllm

int main(int argc, char** argv) {
  using namespace distllm;
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty() || words[0] == "-h" || words[0] == "--help" || words[0] == "help") {
    print_help();
    return words.empty() ? 2 : 0;
  }
  auto& registry = command_registry();
  std::string name = words[0];
  size_t consumed = 1;
  if (words.size() >= 2 && registry.count(words[0] + " " + words[1])) {
    name = words[0] + " " + words[1];
    consumed = 2;
  }
  auto it = registry.find(name);
  if (it == registry.end()) {
    std::string prefix = name + " ";
    bool group = false;
    for (const auto& [n, c] : registry) group = group || n.rfind(prefix, 0) == 0;
    if (group) {
      std::fprintf(stderr, "error: '%s' needs a subcommand:\n", name.c_str());
      for (const auto& [n, c] : registry)
        if (n.rfind(prefix, 0) == 0) std::fprintf(stderr, "  %-20s %s\n", n.c_str(), c.summary.c_str());
    } else {
      std::fprintf(stderr, "error: unknown command '%s' (see distllm --help)\n", name.c_str());
    }
    return 2;
  }
  Args args("distllm " + name, std::vector<std::string>(words.begin() + static_cast<long>(consumed), words.end()));
  // A command may fail on a value before it has read every flag: a mistyped flag
  // is then the likelier cause, and said.
  auto report = [&](const char* prefix, const char* what) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s%s\n", prefix, what);
    const std::string hint = args.unknown_flag_hint();
    if (!hint.empty()) std::fprintf(stderr, "note: %s\n", hint.c_str());
    return 1;
  };
  try {
    return it->second.run(args);
  } catch (const Error& e) {
    return report("", e.what());
  } catch (const std::exception& e) {
    return report("unexpected failure: ", e.what());
  }
}
