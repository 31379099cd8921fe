#include "distllm/http/front.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/timer.h"

namespace distllm::http {
namespace {

constexpr size_t kReadChunk = 64u << 10;
// After refusing a request, keep reading (and dropping) what the client still sends
// for this long before closing: closing with unread input makes the kernel send a
// reset that can destroy the refusal before the client reads it.
constexpr double kLingerSeconds = 2.0;
// ...and for at most this many bytes, so a client that keeps sending after its
// refusal costs bounded work (past it the connection is just closed).
constexpr size_t kMaxLingerBytes = 16u << 20;
// Reads per readiness event, so one fast sender cannot hold the event thread.
constexpr int kMaxReadsPerEvent = 16;
constexpr double kNever = std::numeric_limits<double>::infinity();

thread_local int t_current_socket = -1;

std::string numeric_host(const sockaddr_storage& ss, socklen_t len, int& port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    port = 0;
    return "?";
  }
  port = std::atoi(serv);
  return host;
}

// Writes all of `data` to a non-blocking socket; gives up when a wait for room
// passes `timeout_s` (a client that stopped reading).
bool write_all(int fd, const char* data, size_t n, double timeout_s) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int r = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
      if (r > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
      if (r < 0 && errno == EINTR) continue;
    }
    return false;
  }
  return true;
}

// What a worker hands cpp-httplib: reads come from the canonical request, writes
// go to the client's socket.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int fd, std::string request, double write_timeout_s, const std::string& remote_ip, int remote_port,
                   const std::string& local_ip, int local_port)
      : fd_(fd), request_(std::move(request)), write_timeout_s_(write_timeout_s), remote_ip_(remote_ip),
        remote_port_(remote_port), local_ip_(local_ip), local_port_(local_port) {}

  bool is_readable() const override { return pos_ < request_.size(); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return !failed_ && ::poll(&p, 1, static_cast<int>(write_timeout_s_ * 1000)) > 0 &&
           !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
  }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, request_.size() - pos_);
    std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (failed_ || !write_all(fd_, ptr, size, write_timeout_s_)) {
      failed_ = true;
      return -1;
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return fd_; }
  bool failed() const { return failed_; }

 private:
  int fd_;
  std::string request_;
  size_t pos_ = 0;
  double write_timeout_s_;
  const std::string& remote_ip_;
  int remote_port_;
  const std::string& local_ip_;
  int local_port_;
  bool failed_ = false;
};

struct Connection {
  // kHead: waiting for (the rest of) a head; kIdle: between requests, nothing
  // received yet; kBusy: a worker answers it (not watched by epoll); kClosing:
  // refused, dropping input until the client closes or the linger time passes.
  enum class Phase { kIdle, kHead, kBody, kBusy, kClosing };
  Connection(ReaderLimits limits, const RequestReader::Screen* screen) : reader(limits, screen) {}
  int fd = -1;
  std::string ip, local_ip;
  int port = 0, local_port = 0;
  Phase phase = Phase::kHead;
  bool watched = false;  // registered with epoll
  RequestReader reader;
  double deadline = kNever;
  int served = 0;
  size_t dropped = 0;  // bytes read and thrown away while closing
};

}  // namespace

struct HttpFront::Impl {
  HttpFront& front;
  FrontLimits limits;
  Processor process;
  Screen screen;
  ErrorBody error_body;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::unordered_map<int, std::unique_ptr<Connection>> conns;
  std::unordered_map<std::string, int> per_ip;
  std::unique_ptr<httplib::ThreadPool> pool;
  std::vector<char> scratch = std::vector<char>(kReadChunk);
  double next_deadline = kNever;
  double accept_paused_until = 0;  // > 0: the listener is out of epoll until then
  bool draining = false;

  // Shared with workers and other threads.
  std::mutex mu;
  std::vector<std::pair<Connection*, bool>> returned;  // (connection, keep it open)
  bool stop_requested = false, drain_requested = false;

  Impl(HttpFront& f, FrontLimits l, Processor p, Screen s, ErrorBody e)
      : front(f), limits(l), process(std::move(p)), screen(std::move(s)), error_body(std::move(e)) {
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    DL_CHECK(epoll_fd >= 0 && wake_fd >= 0, "http: cannot create epoll/eventfd: %s", std::strerror(errno));
    watch(wake_fd, EPOLL_CTL_ADD);
  }
  ~Impl() {
    for (auto& [fd, c] : conns) ::close(fd);
    if (listen_fd >= 0) ::close(listen_fd);
    ::close(epoll_fd);
    ::close(wake_fd);
  }

  void watch(int fd, int op) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, op, fd, &ev);
  }
  void set_watched(Connection& c, bool on) {
    if (c.watched == on) return;
    if (on) watch(c.fd, EPOLL_CTL_ADD);
    else ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.watched = on;
  }
  void set_deadline(Connection& c, double d) {
    c.deadline = d;
    next_deadline = std::min(next_deadline, d);
  }
  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  int bind(const std::string& host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    std::string service = std::to_string(port);
    int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
    DL_CHECK(rc == 0, "cannot listen on %s:%d: %s", host.c_str(), port, gai_strerror(rc));
    int fd = -1;
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int yes = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
        ::close(fd);
        fd = -1;
      }
    }
    ::freeaddrinfo(res);
    DL_CHECK(fd >= 0, "cannot listen on %s:%d (address in use, or not an address of this machine?)", host.c_str(),
             port);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    int bound = 0;
    numeric_host(ss, len, bound);
    listen_fd = fd;
    watch(listen_fd, EPOLL_CTL_ADD);
    return bound;
  }

  void refuse_at_accept(int fd, int status, const std::string& message) {
    FramingError err{status, message, "too_many_connections"};
    std::string out = closing_response(status, error_body(err), "Retry-After: 1\r\n");
    [[maybe_unused]] ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }

  void accept_all() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: leave the listener alone for a moment instead of
          // spinning on a socket that stays readable.
          LOG_WARN("http: cannot accept (%s); pausing accepts for 100 ms", std::strerror(errno));
          ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          accept_paused_until = now_seconds() + 0.1;
        }
        return;  // EAGAIN: all accepted
      }
      int port = 0;
      std::string ip = numeric_host(ss, len, port);
      if (front.open_.load() >= limits.max_connections) {
        refuse_at_accept(fd, 503, "the server has too many open connections; retry later");
        continue;
      }
      int& from_ip = per_ip[ip];
      if (from_ip >= limits.max_connections_per_ip) {
        refuse_at_accept(fd, 503, "too many open connections from " + ip + "; retry later");
        if (from_ip == 0) per_ip.erase(ip);
        continue;
      }
      ++from_ip;
      front.open_++;
      // Responses go out as several writes (head, then body or events): without
      // TCP_NODELAY, Nagle holds the second until the client's delayed ACK of the
      // first, up to 40 ms on every request of a keep-alive connection.
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Connection>(ReaderLimits{limits.max_head_bytes, limits.max_body_bytes}, &screen);
      c->fd = fd;
      c->ip = std::move(ip);
      c->port = port;
      sockaddr_storage local{};
      socklen_t llen = sizeof local;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen);
      c->local_ip = numeric_host(local, llen, c->local_port);
      c->phase = Connection::Phase::kHead;  // a new connection owes a head within the header timeout
      set_deadline(*c, now_seconds() + limits.header_timeout_s);
      set_watched(*c, true);
      conns.emplace(fd, std::move(c));
    }
  }

  void close_conn(Connection& c) {
    set_watched(c, false);
    ::close(c.fd);
    auto it = per_ip.find(c.ip);
    if (it != per_ip.end() && --it->second <= 0) per_ip.erase(it);
    front.open_--;
    conns.erase(c.fd);  // destroys c
  }

  // Half-closes and drops further input for a while (see kLingerSeconds).
  void linger_close(Connection& c) {
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Connection::Phase::kClosing;
    c.reader.discard();
    set_watched(c, true);
    set_deadline(c, now_seconds() + kLingerSeconds);
  }

  void refuse(Connection& c, const FramingError& err) {
    std::string out = closing_response(err.status, error_body(err));
    [[maybe_unused]] ssize_t n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    linger_close(c);
  }

  // Moves a connection's buffered input through head and body; dispatches a
  // complete request. Returns false once the connection stops being read here.
  bool advance(Connection& c) {
    using Phase = Connection::Phase;
    if (c.phase == Phase::kIdle) {
      if (!c.reader.has_input()) return true;
      c.phase = Phase::kHead;
      set_deadline(c, now_seconds() + limits.header_timeout_s);
    }
    while (true) {
      switch (c.reader.next()) {
        case RequestReader::Event::kNeedMore:
          return true;
        case RequestReader::Event::kError:
          refuse(c, c.reader.error());  // before a single byte of a screened-out body is read
          return false;
        case RequestReader::Event::kHeadDone:
          if (c.reader.wants_continue()) {
            static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
            [[maybe_unused]] ssize_t n = ::send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          }
          c.phase = Phase::kBody;
          set_deadline(c, now_seconds() + limits.body_timeout_s);
          continue;
        case RequestReader::Event::kRequest:
          dispatch(c);
          return false;
      }
    }
  }

  void dispatch(Connection& c) {
    set_watched(c, false);  // a pipelined next request waits until this one is answered
    c.phase = Connection::Phase::kBusy;
    c.deadline = kNever;
    front.busy_++;
    bool close = draining || !c.reader.head().keep_alive || ++c.served >= limits.max_requests_per_connection;
    std::string request = c.reader.take_request();
    Connection* cp = &c;
    pool->enqueue([this, cp, close, request = std::move(request)]() mutable {
      ConnectionStream strm(cp->fd, std::move(request), limits.write_timeout_s, cp->ip, cp->port, cp->local_ip,
                            cp->local_port);
      bool closed = false, ok = false;
      t_current_socket = cp->fd;
      try {
        ok = process(strm, close, closed);
      } catch (const std::exception& e) {
        LOG_ERROR("http: request failed: %s", e.what());
      }
      t_current_socket = -1;
      bool keep = ok && !close && !closed && !strm.failed();
      {
        std::lock_guard<std::mutex> lock(mu);
        returned.emplace_back(cp, keep);
      }
      wake();
    });
  }

  void on_readable(Connection& c) {
    for (int reads = 0; reads < kMaxReadsPerEvent; ++reads) {  // level-triggered: the rest comes next round
      ssize_t n = ::recv(c.fd, scratch.data(), scratch.size(), 0);
      if (n > 0) {
        if (c.phase == Connection::Phase::kClosing) {
          c.dropped += static_cast<size_t>(n);
          if (c.dropped > kMaxLingerBytes) {
            close_conn(c);
            return;
          }
          continue;
        }
        c.reader.append(std::string_view(scratch.data(), static_cast<size_t>(n)));
        if (!advance(c)) return;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_conn(c);  // end of input or an error: nothing more can be answered
      return;
    }
  }

  // Takes back connections from workers; applies stop and drain. Returns true to stop.
  bool handle_messages() {
    std::vector<std::pair<Connection*, bool>> back;
    bool stop = false, drain = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      back.swap(returned);
      stop = stop_requested;
      drain = drain_requested && !draining;
    }
    if (drain) draining = true;
    for (auto [c, keep] : back) {
      front.busy_--;
      if (!keep || draining) {
        linger_close(*c);
        continue;
      }
      c->phase = Connection::Phase::kIdle;
      set_deadline(*c, now_seconds() + limits.keep_alive_timeout_s);
      set_watched(*c, true);
      if (c->reader.has_input()) advance(*c);  // a pipelined request already read
    }
    if (drain) {
      std::vector<Connection*> idle;
      for (auto& [fd, c] : conns)
        if (c->phase == Connection::Phase::kIdle && !c->reader.has_input()) idle.push_back(c.get());
      for (Connection* c : idle) close_conn(*c);
    }
    return stop;
  }

  void sweep() {
    double now = now_seconds();
    if (accept_paused_until > 0 && now >= accept_paused_until) {
      accept_paused_until = 0;
      watch(listen_fd, EPOLL_CTL_ADD);
    }
    if (now < next_deadline) return;
    next_deadline = kNever;
    std::vector<Connection*> expired;
    for (auto& [fd, c] : conns) {
      if (c->phase == Connection::Phase::kBusy) continue;
      if (c->deadline <= now) expired.push_back(c.get());
      else next_deadline = std::min(next_deadline, c->deadline);
    }
    for (Connection* c : expired) {
      bool mid_request =
          (c->phase == Connection::Phase::kHead && c->reader.has_input()) || c->phase == Connection::Phase::kBody;
      if (mid_request) {
        double limit = c->phase == Connection::Phase::kBody ? limits.body_timeout_s : limits.header_timeout_s;
        refuse(*c, FramingError{408, strprintf("the request was not received within %g s", limit), "request_timeout"});
      } else {
        close_conn(*c);  // idle, never sent anything, or done lingering
      }
    }
  }

  int timeout_ms() const {
    double until = next_deadline;
    if (accept_paused_until > 0) until = std::min(until, accept_paused_until);
    if (until == kNever) return -1;  // nothing to time: sleep until an event
    double ms = std::ceil((until - now_seconds()) * 1000.0);
    return static_cast<int>(std::clamp(ms, 1.0, 60000.0));
  }

  void run() {
    pool = std::make_unique<httplib::ThreadPool>(static_cast<size_t>(std::max(1, limits.workers)));
    std::vector<epoll_event> events(256);
    while (true) {
      int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms());
      if (n < 0 && errno != EINTR) {
        LOG_ERROR("http: epoll_wait failed: %s", std::strerror(errno));
        break;
      }
      for (int i = 0; i < n; ++i) {
        int fd = events[static_cast<size_t>(i)].data.fd;
        if (fd == wake_fd) {
          uint64_t v;
          [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
        } else if (fd == listen_fd) {
          accept_all();
        } else if (auto it = conns.find(fd); it != conns.end() && it->second->phase != Connection::Phase::kBusy) {
          on_readable(*it->second);
        }
      }
      if (handle_messages()) break;
      sweep();
    }
    ::close(listen_fd);
    listen_fd = -1;
    pool->shutdown();  // lets the requests being answered finish
    handle_messages();
    while (!conns.empty()) close_conn(*conns.begin()->second);
  }
};

HttpFront::HttpFront(FrontLimits limits, Processor process, Screen screen, ErrorBody error_body)
    : impl_(std::make_unique<Impl>(*this, limits, std::move(process), std::move(screen), std::move(error_body))) {}

HttpFront::~HttpFront() = default;

int HttpFront::bind(const std::string& host, int port) { return impl_->bind(host, port); }

void HttpFront::run() { impl_->run(); }

void HttpFront::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop_requested = true;
  }
  impl_->wake();
}

void HttpFront::set_draining() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->drain_requested = true;
  }
  impl_->wake();
}

int HttpFront::current_socket() { return t_current_socket; }

}  // namespace distllm::http
