// Command-line flags: `--name value`, `--name=value`, bare `--flag` booleans, and
// single-letter `-x value` (a flag named "x").
//
// Every flag a command reads is recorded with its help text, so `--help` lists them
// and `finish()` rejects any flag the command never asked for (a typo such as
// `--bach 8` is an error naming the flag, not silently ignored).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace distllm {

class Args {
 public:
  Args(std::string program, std::vector<std::string> argv);

  std::string get_string(const std::string& name, const std::string& fallback, const std::string& help);
  std::optional<std::string> get_optional(const std::string& name, const std::string& help);
  std::string get_required(const std::string& name, const std::string& help);
  int64_t get_int(const std::string& name, int64_t fallback, const std::string& help);
  // An int in [min, max]; a value outside is refused naming the bound it passes.
  int get_int_in(const std::string& name, int fallback, int min, int max, const std::string& help);
  double get_double(const std::string& name, double fallback, const std::string& help);
  bool get_flag(const std::string& name, const std::string& help);
  // A flag that may repeat or take several values: `--input a b c` or `--input a --input b`.
  std::vector<std::string> get_list(const std::string& name, const std::string& help);
  // Everything after a bare `--`.
  const std::vector<std::string>& rest() const { return rest_; }
  const std::vector<std::string>& positional() const { return positional_; }

  bool help_requested() const { return help_; }
  std::string usage() const;
  // Throws if an unknown flag was given, naming the closest known one ("did you
  // mean --batch?"). Call after reading every flag.
  void finish() const;
  // For an error raised before finish(): the flags given but not read so far that
  // are a typo away from one that was ("--bach is not a flag of 'distllm train';
  // did you mean --batch?"), or "".
  std::string unknown_flag_hint() const;
  // Call after reading every flag: prints usage and returns true for --help,
  // otherwise checks for unknown flags (throwing) and returns false.
  bool help_or_finish() const;

 private:
  struct Seen {
    std::vector<std::string> values;
    bool bare = false;  // given without a value
  };
  std::string program_;
  std::map<std::string, Seen> given_;
  std::vector<std::string> positional_;
  std::vector<std::string> rest_;
  std::vector<std::pair<std::string, std::string>> documented_;
  bool help_ = false;

  const Seen* lookup(const std::string& name, const std::string& help, const std::string& shown_default);
  std::vector<std::string> unread_flags() const;
  std::string closest_flag(const std::string& name) const;  // "" when none is close
  std::string single(const Seen& seen, const std::string& name) const;
};

}  // namespace distllm
