// Small string helpers (g++ 12 has no std::format).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distllm {

std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::vector<std::string> split(std::string_view s, char sep);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

// A Prometheus label value with \\, \" and newlines escaped (the text format's rules).
std::string escape_prometheus_label(std::string_view value);

// "1.5 GiB", "12.0 MiB", "512 B"
std::string human_bytes(double bytes);

// Parses "123", "4k"/"4K" (x1024), "8M", "2G" into a byte or element count.
// Throws distllm::Error naming `what` on malformed input.
int64_t parse_size(std::string_view text, std::string_view what);

}  // namespace distllm
