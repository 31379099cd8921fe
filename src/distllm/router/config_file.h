// The router's JSON config file (`distllm route --config FILE`), for what is long to
// give as flags:
//
//   {"replicas": ["http://127.0.0.1:8001", "http://127.0.0.1:8002"],
//    "policy": "cache_aware",
//    "splits": {"chat": {"gpt2-v1": 90, "gpt2-v2": 10}}}
//
// Every key is optional; replicas and splits add to those given as flags, policy
// replaces the flag's. An unknown key is an error (a typo must not pass silently).
#pragma once

#include <string>

#include "distllm/router/proxy.h"

namespace distllm::router {

// Throws distllm::Error naming the file and what is wrong.
void apply_config_file(const std::string& path, RouterConfig& config);

}  // namespace distllm::router
