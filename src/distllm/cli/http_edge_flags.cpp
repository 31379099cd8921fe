#include "distllm/cli/http_edge_flags.h"

#include <string>

#include "distllm/base/error.h"
#include "distllm/http/edge.h"

namespace distllm {

http::FrontLimits read_http_edge_flags(Args& args, http::FrontLimits d) {
  http::FrontLimits l = d;
  l.max_body_bytes = static_cast<size_t>(args.get_int("max-body-size", static_cast<int64_t>(d.max_body_bytes),
                                                      "request body limit in bytes (2M)"));
  l.header_timeout_s = args.get_double("header-timeout", d.header_timeout_s, "seconds for a request's head to arrive");
  l.body_timeout_s =
      args.get_double("body-timeout", d.body_timeout_s, "seconds for a request's body to arrive after its head");
  l.keep_alive_timeout_s = args.get_double("keep-alive-timeout", d.keep_alive_timeout_s, "seconds an idle connection is kept");
  l.max_connections =
      static_cast<int>(args.get_int("max-connections", d.max_connections, "open connections at most (more get 503)"));
  l.max_connections_per_ip = static_cast<int>(
      args.get_int("max-connections-per-ip", d.max_connections_per_ip, "open connections from one client address"));
  return l;
}

void check_http_edge_flags(http::FrontLimits& l, const char* command) {
  DL_CHECK(l.max_body_bytes >= 1024, "--max-body-size must be at least 1k");
  DL_CHECK(l.header_timeout_s > 0 && l.body_timeout_s > 0 && l.keep_alive_timeout_s > 0,
           "--header-timeout, --body-timeout and --keep-alive-timeout must be positive");
  DL_CHECK(l.max_connections >= 1 && l.max_connections_per_ip >= 1,
           "--max-connections and --max-connections-per-ip must be at least 1");
  l.max_connections = http::fit_connections_to_fd_limit(l.max_connections, (std::string(command) + ": --max-connections").c_str());
}

}  // namespace distllm
