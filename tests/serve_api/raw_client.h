// A raw TCP client for tests that must send what no HTTP library would: broken
// framing, pipelined requests, bodies that never end, heads that trickle.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "distllm/base/timer.h"

namespace distllm::serve::api::test_support {

class RawConnection {
 public:
  // Connects to 127.0.0.1:port from `from_ip` (any 127.x.y.z address is this
  // machine, so tests can play several clients).
  explicit RawConnection(int port, const char* from_ip = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, from_ip, &from.sin_addr);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads until the server closes the connection or `timeout_s` passes; `eof`
  // tells which.
  std::string read_until_close(double timeout_s, bool* eof = nullptr) {
    std::string out;
    Timer t;
    bool closed = false;
    while (t.seconds() < timeout_s) {
      pollfd p{fd_, POLLIN, 0};
      int left_ms = static_cast<int>((timeout_s - t.seconds()) * 1000) + 1;
      if (::poll(&p, 1, left_ms) <= 0) break;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    if (eof) *eof = closed;
    return out;
  }

  // Reads until `needle` has arrived (or the timeout / close).
  std::string read_until(std::string_view needle, double timeout_s) {
    std::string out;
    Timer t;
    while (t.seconds() < timeout_s && out.find(needle) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// How many HTTP responses with this status a byte stream holds.
inline int count_status(const std::string& responses, int status) {
  std::string needle = "HTTP/1.1 " + std::to_string(status) + " ";
  int n = 0;
  for (size_t at = responses.find(needle); at != std::string::npos; at = responses.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace distllm::serve::api::test_support
