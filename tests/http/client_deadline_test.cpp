// A client request to a server that accepts the connection and never answers (a
// SIGSTOPped or hung process looks exactly like this: the kernel completes the
// handshake) ends at the head deadline, not at the read timeout.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <httplib.h>

#include "distllm/base/timer.h"
#include "distllm/http/client_deadline.h"

namespace distllm::http {
namespace {

// A listening socket nobody accepts on.
struct SilentServer {
  int fd = -1;
  int port = 0;
  SilentServer() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~SilentServer() { ::close(fd); }
};

TEST(HttpClientDeadline, ASilentServerCostsTheHeadDeadlineNotTheReadTimeout) {
  SilentServer silent;
  httplib::Client cli("127.0.0.1", silent.port);
  cli.set_read_timeout(30, 0);
  Timer t;
  ClientDeadline deadline(cli, 0.3, 30);
  httplib::Request req;
  req.method = "POST";
  req.path = "/internal/kv/prefill";
  req.body = "{}";
  req.response_handler = [&](const httplib::Response&) {
    deadline.got_head();
    return true;
  };
  httplib::Result r = cli.send(req);
  EXPECT_FALSE(r);
  EXPECT_EQ(deadline.finish(), ClientDeadline::Missed::kHead);
  EXPECT_LT(t.seconds(), 3.0);
  EXPECT_GE(t.seconds(), 0.25);
}

TEST(HttpClientDeadline, AnAnswerInTimeIsLeftAlone) {
  httplib::Server svr;
  svr.Get("/x", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  const int port = svr.bind_to_any_port("127.0.0.1");
  std::thread th([&] { svr.listen_after_bind(); });
  httplib::Client cli("127.0.0.1", port);
  ClientDeadline deadline(cli, 5, 10);
  std::string body;
  httplib::Result r = cli.Get(
      "/x",
      [&](const httplib::Response&) {
        deadline.got_head();
        return true;
      },
      [&](const char* data, size_t n) {
        body.append(data, n);
        return true;
      });
  EXPECT_EQ(deadline.finish(), ClientDeadline::Missed::kNone);
  ASSERT_TRUE(r);
  EXPECT_EQ(body, "ok");
  svr.stop();
  th.join();
}

}  // namespace
}  // namespace distllm::http
