// Finding out that an HTTP client went away while its request is still running.
//
// cpp-httplib does not hand its handlers the connection's socket, and writing is
// the only way it notices a closed peer. A request waiting in the queue or in a
// long prefill writes nothing for a long time, so instead we locate the socket by
// the connection's addresses (the one TCP connection with this local and remote
// address and port among this process's descriptors) and poll it: end-of-file or a
// reset on the request's connection means the client is gone (as uvicorn and
// vLLM treat it).
#pragma once

#include <string>

namespace distllm::serve::api {

// The descriptor of the connected socket with these endpoints, or -1.
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port);

// True when the peer closed or reset the connection (never blocks). A socket with
// unread request bytes (pipelining) counts as alive.
bool peer_closed(int fd);

}  // namespace distllm::serve::api
