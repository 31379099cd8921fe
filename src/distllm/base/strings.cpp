#include "distllm/base/strings.h"

#include <cstdarg>
#include <cstdio>

#include "distllm/base/error.h"

namespace distllm {

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n));
    std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  }
  va_end(args);
  return out;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.emplace_back(s.substr(start));
      return parts;
    }
    parts.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.starts_with(prefix); }
bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? strprintf("%.0f %s", bytes, units[u]) : strprintf("%.1f %s", bytes, units[u]);
}

int64_t parse_size(std::string_view text, std::string_view what) {
  DL_CHECK(!text.empty(), "%.*s: empty size", (int)what.size(), what.data());
  int64_t mult = 1;
  char last = text.back();
  if (last == 'k' || last == 'K') mult = int64_t(1) << 10;
  if (last == 'm' || last == 'M') mult = int64_t(1) << 20;
  if (last == 'g' || last == 'G') mult = int64_t(1) << 30;
  std::string_view digits = mult == 1 ? text : text.substr(0, text.size() - 1);
  DL_CHECK(!digits.empty(), "%.*s: malformed size '%.*s'", (int)what.size(), what.data(),
           (int)text.size(), text.data());
  int64_t value = 0;
  for (char c : digits) {
    DL_CHECK(c >= '0' && c <= '9', "%.*s: malformed size '%.*s'", (int)what.size(), what.data(),
             (int)text.size(), text.data());
    DL_CHECK(value < (int64_t(1) << 50), "%.*s: size '%.*s' is too large", (int)what.size(),
             what.data(), (int)text.size(), text.data());
    value = value * 10 + (c - '0');
  }
  return value * mult;
}

std::string escape_prometheus_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace distllm
