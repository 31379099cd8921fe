// Finding out that an HTTP client went away while its request is still running.
//
// Writing is the only way cpp-httplib notices a closed peer, and a request waiting
// in the queue or in a long prefill writes nothing for a long time, so handlers
// poll their connection's socket (HttpFront::current_socket()): end-of-file or a
// reset means the client is gone (as uvicorn and vLLM treat it).
#pragma once

#include <string>

namespace distllm::http {

// True when the peer closed or reset the connection (never blocks). A socket with
// unread request bytes (pipelining) counts as alive.
bool peer_closed(int fd);

}  // namespace distllm::http
