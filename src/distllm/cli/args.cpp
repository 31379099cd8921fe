#include "distllm/cli/args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

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

namespace {

// Levenshtein distance, capped: enough to tell a typo from another flag.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string dashes(const std::string& name) { return name.size() == 1 ? "-" : "--"; }

}  // namespace

const Args::Seen* Args::lookup(const std::string& name, const std::string& help,
                               const std::string& shown_default) {
  // A help text that explains its own default (a sentinel such as -1 or 0) keeps it.
  const bool explained = help.find("default") != std::string::npos;
  documented_.emplace_back(name, shown_default.empty() || explained ? help : help + " (default: " + shown_default + ")");
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

int Args::get_int_in(const std::string& name, int fallback, int min, int max, const std::string& help) {
  const int64_t v = get_int(name, fallback, help);
  DL_CHECK(v >= min, "--%s must be at least %d, got %lld", name.c_str(), min, (long long)v);
  DL_CHECK(v <= max, "--%s = %lld is larger than the maximum %d", name.c_str(), (long long)v, max);
  return static_cast<int>(v);
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

std::string Args::closest_flag(const std::string& name) const {
  std::string best;
  size_t best_distance = 3;  // at most two edits away, and closer than any other
  for (const auto& d : documented_) {
    const size_t dist = edit_distance(name, d.first);
    if (dist < best_distance && dist < d.first.size()) best_distance = dist, best = d.first;
  }
  return best;
}

std::vector<std::string> Args::unread_flags() const {
  std::vector<std::string> out;
  for (const auto& [name, seen] : given_) {
    bool known = false;
    for (const auto& d : documented_) known = known || d.first == name;
    if (!known) out.push_back(name);
  }
  return out;
}

std::string Args::unknown_flag_hint() const {
  std::string hint;
  for (const std::string& name : unread_flags()) {
    const std::string close = closest_flag(name);
    if (close.empty()) continue;
    hint += strprintf("%s%s%s is not a flag of '%s'; did you mean %s%s?", hint.empty() ? "" : " ",
                      dashes(name).c_str(), name.c_str(), program_.c_str(), dashes(close).c_str(), close.c_str());
  }
  return hint;
}

void Args::finish() const {
  for (const std::string& name : unread_flags()) {
    const std::string close = closest_flag(name);
    throw_error(strprintf("unknown flag %s%s for '%s'%s (see --help)", dashes(name).c_str(), name.c_str(),
                          program_.c_str(),
                          close.empty() ? "" : strprintf("; did you mean %s%s?", dashes(close).c_str(), close.c_str()).c_str()));
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
