// The flags of the HTTP edge (http/edge.h) that `distllm serve` and `distllm route`
// both take: the body limit, the read deadlines and the connection caps, with one
// help text and one check.
#pragma once

#include "distllm/cli/args.h"
#include "distllm/http/front.h"

namespace distllm {

// Reads --max-body-size, --header-timeout, --body-timeout, --keep-alive-timeout,
// --max-connections and --max-connections-per-ip (workers are left as given).
http::FrontLimits read_http_edge_flags(Args& args, http::FrontLimits defaults = {});
// After help_or_finish(): throws naming a flag whose value is out of range, then
// lowers --max-connections to fit the open-file limit (warning as `command`).
void check_http_edge_flags(http::FrontLimits& limits, const char* command);

}  // namespace distllm
