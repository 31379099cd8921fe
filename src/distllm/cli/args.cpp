#include "distllm/cli/args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/error.h"

namespace distllm {

Args::Args(std::string program, std::vector<std::string> argv) : program_(std::move(program)) {
  std::string current;  // flag collecting values
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      rest_.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (a == "-h" || a == "--help") {
      help_ = true;
      current.clear();
      continue;
    }
    bool is_flag = a.size() > 2 && a[0] == '-' && a[1] == '-';
    // Single-letter short flags (`-b 8`, as nccl-tests spells them) are flags named
    // by the letter; "-5" stays a value.
    bool is_short = a.size() == 2 && a[0] == '-' && std::isalpha(static_cast<unsigned char>(a[1]));
    if (is_flag || is_short) {
      std::string body = a.substr(is_short ? 1 : 2);
      size_t eq = body.find('=');
      if (eq != std::string::npos) {
        given_[body.substr(0, eq)].values.push_back(body.substr(eq + 1));
        current.clear();
      } else {
        given_[body].bare = true;
        current = body;
      }
      continue;
    }
    if (!current.empty()) {
      Seen& s = given_[current];
      s.values.push_back(a);
      if (s.bare && s.values.size() >= 1) s.bare = false;
    } else {
      positional_.push_back(a);
    }
  }
}

const Args::Seen* Args::lookup(const std::string& name, const std::string& help,
                               const std::string& shown_default) {
  documented_.emplace_back(name, shown_default.empty() ? help : help + " (default: " + shown_default + ")");
  auto it = given_.find(name);
  return it == given_.end() ? nullptr : &it->second;
}

std::string Args::single(const Seen& seen, const std::string& name) const {
  DL_CHECK(!seen.values.empty(), "--%s needs a value", name.c_str());
  DL_CHECK(seen.values.size() == 1, "--%s given %zu values; expected one", name.c_str(), seen.values.size());
  return seen.values[0];
}

std::string Args::get_string(const std::string& name, const std::string& fallback, const std::string& help) {
  const Seen* s = lookup(name, help, fallback.empty() ? "" : fallback);
  return s ? single(*s, name) : fallback;
}

std::optional<std::string> Args::get_optional(const std::string& name, const std::string& help) {
  const Seen* s = lookup(name, help, "");
  if (!s) return std::nullopt;
  return single(*s, name);
}

std::string Args::get_required(const std::string& name, const std::string& help) {
  const Seen* s = lookup(name, help + " [required]", "");
  if (help_) return s ? single(*s, name) : std::string();
  DL_CHECK(s != nullptr, "missing required flag --%s (%s)", name.c_str(), help.c_str());
  return single(*s, name);
}

int64_t Args::get_int(const std::string& name, int64_t fallback, const std::string& help) {
  const Seen* s = lookup(name, help, std::to_string(fallback));
  if (!s) return fallback;
  std::string v = single(*s, name);
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(v.c_str(), &end, 10);
  if (end != nullptr && *end != '\0' && end[1] == '\0' && (*end == 'k' || *end == 'K' || *end == 'm' || *end == 'M' || *end == 'g' || *end == 'G'))
    return parse_size(v, "--" + name);
  DL_CHECK(errno == 0 && end != v.c_str() && *end == '\0', "--%s expects an integer, got '%s'",
           name.c_str(), v.c_str());
  return parsed;
}

double Args::get_double(const std::string& name, double fallback, const std::string& help) {
  const Seen* s = lookup(name, help, strprintf("%g", fallback));
  if (!s) return fallback;
  std::string v = single(*s, name);
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(v.c_str(), &end);
  DL_CHECK(errno == 0 && end != v.c_str() && *end == '\0' && std::isfinite(parsed),
           "--%s expects a number, got '%s'", name.c_str(), v.c_str());
  return parsed;
}

bool Args::get_flag(const std::string& name, const std::string& help) {
  const Seen* s = lookup(name, help, "");
  if (!s) return false;
  if (s->values.empty()) return true;
  const std::string& v = s->values.back();
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw_error(strprintf("--%s is a switch; got value '%s'", name.c_str(), v.c_str()));
}

std::vector<std::string> Args::get_list(const std::string& name, const std::string& help) {
  const Seen* s = lookup(name, help, "");
  return s ? s->values : std::vector<std::string>{};
}

std::string Args::usage() const {
  std::string out = "usage: " + program_ + " [flags]\n";
  for (const auto& [name, help] : documented_)
    out += strprintf("  %s%-24s %s\n", name.size() == 1 ? "-" : "--", name.c_str(), help.c_str());
  return out;
}

void Args::finish() const {
  for (const auto& [name, seen] : given_) {
    bool known = false;
    for (const auto& d : documented_) known = known || d.first == name;
    DL_CHECK(known, "unknown flag %s%s for '%s' (see --help)", name.size() == 1 ? "-" : "--", name.c_str(),
             program_.c_str());
  }
}

bool Args::help_or_finish() const {
  if (help_) {
    std::fputs(usage().c_str(), stdout);
    return true;
  }
  finish();
  return false;
}

}  // namespace distllm
