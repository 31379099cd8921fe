// HTTP framing as a hostile or careless client sends it, over real sockets: bodies
// that never end, refused requests whose bodies must not be read, ambiguous
// lengths, pipelining, curl's default content type. Each test runs against the
// server and against the router in front of it (edge_target.h).
#include <gtest/gtest.h>

#include <httplib.h>

#include "serve_api/api_fixture.h"
#include "serve_api/edge_target.h"
#include "serve_api/raw_client.h"

namespace distllm::serve::api {
namespace {

using namespace test_support;

class Framing : public ::testing::TestWithParam<EdgeKind> {};
INSTANTIATE_TEST_SUITE_P(Edge, Framing, ::testing::Values(EdgeKind::kServer, EdgeKind::kRouter));

ApiServerConfig small_body_limit() {
  ApiServerConfig sc = Server::config();
  sc.max_body_bytes = 64 << 10;
  return sc;
}

// Sends a chunked body of up to 100 MB as fast as the server takes it; stops when
// the server answers. Returns the bytes sent then.
size_t send_endless_chunked_body(RawConnection& c) {
  std::string chunk = "4000\r\n" + std::string(0x4000, 'a') + "\r\n";
  ::fcntl(c.fd(), F_SETFL, ::fcntl(c.fd(), F_GETFL) | O_NONBLOCK);
  size_t sent = 0, offset = 0;
  Timer t;
  while (sent < (100u << 20) && t.seconds() < 20) {
    pollfd p{c.fd(), POLLIN | POLLOUT, 0};
    if (::poll(&p, 1, 2000) <= 0) break;
    if (p.revents & (POLLIN | POLLERR | POLLHUP)) break;  // an answer (or the end)
    ssize_t n = ::send(c.fd(), chunk.data() + offset, chunk.size() - offset, MSG_NOSIGNAL);
    if (n <= 0) {
      if (errno == EAGAIN) continue;
      break;
    }
    sent += static_cast<size_t>(n);
    offset = (offset + static_cast<size_t>(n)) % chunk.size();
  }
  ::fcntl(c.fd(), F_SETFL, ::fcntl(c.fd(), F_GETFL) & ~O_NONBLOCK);
  return sent;
}

TEST_P(Framing, ChunkedBodyIsHeldToTheLimitWhileBeingRead) {
  EdgeTarget s(GetParam(), small_body_limit());
  RawConnection c(s.port);
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"));
  size_t sent = send_endless_chunked_body(c);
  // The server stops at 64 KiB; what else was sent sits in socket buffers.
  EXPECT_LT(sent, 32u << 20) << "the server kept reading a body far over the limit";
  bool eof = false;
  std::string answer = c.read_until_close(5, &eof);
  EXPECT_EQ(count_status(answer, 413), 1) << answer.substr(0, 300);
  EXPECT_NE(answer.find("larger than the limit"), std::string::npos);
  // A chunked body under the limit is fine.
  RawConnection ok(s.port);
  std::string body = completion("chunked", 3).dump();
  char size[32];
  std::snprintf(size, sizeof size, "%zx", body.size());
  ASSERT_TRUE(ok.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                      std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n"));
  EXPECT_EQ(count_status(ok.read_until_close(5), 200), 1);
}

TEST_P(Framing, WithAnApiKeyUnauthenticatedBodiesAreNeverRead) {
  ApiServerConfig sc = small_body_limit();
  sc.api_key = "sekret";
  EdgeTarget s(GetParam(), sc);
  // The head alone gets the 401 (no body was sent), and the connection closes.
  RawConnection c(s.port);
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  bool eof = false;
  std::string answer = c.read_until_close(5, &eof);
  EXPECT_EQ(count_status(answer, 401), 1) << answer;
  EXPECT_NE(answer.find("invalid_api_key"), std::string::npos);
  EXPECT_TRUE(eof) << "the connection stayed open for a body nobody will read";
  // Same with a huge Content-Length, and with an endless body.
  RawConnection big(s.port);
  ASSERT_TRUE(big.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n"));
  EXPECT_EQ(count_status(big.read_until_close(5, &eof), 401), 1);
  EXPECT_TRUE(eof);
  RawConnection endless(s.port);
  ASSERT_TRUE(endless.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_LT(send_endless_chunked_body(endless), 32u << 20);
}

TEST_P(Framing, CurlsDefaultFormContentTypeIsReadAsJson) {
  EdgeTarget s(GetParam());
  Json body = completion("form", 3);
  body["padding"] = std::string(20000, 'x');  // unknown fields are ignored; > 8 KB
  httplib::Client cli("127.0.0.1", s.port);
  auto res = cli.Post("/v1/completions", body.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_P(Framing, AmbiguousLengthsAre400AndClose) {
  EdgeTarget s(GetParam());
  for (const char* head : {"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                           "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n",
                           "Content-Length: 2\r\nContent-Length: 3\r\n", "Content-Length: 2, 3\r\n",
                           "Content-Length: -2\r\n", "Transfer-Encoding: gzip\r\n"}) {
    RawConnection c(s.port);
    ASSERT_TRUE(c.send(std::string("POST /v1/completions HTTP/1.1\r\nHost: t\r\n") + head + "\r\n{}\r\n\r\n"));
    bool eof = false;
    std::string answer = c.read_until_close(5, &eof);
    EXPECT_EQ(count_status(answer, 400), 1) << head << answer;
    EXPECT_TRUE(eof) << head << ": the connection stayed open";
  }
  // Repeating the same length is not ambiguous.
  RawConnection same(s.port);
  std::string body = completion("same", 2).dump();
  std::string len = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  ASSERT_TRUE(same.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + len + len + "\r\n" + body));
  EXPECT_EQ(count_status(same.read_until_close(5), 200), 1);
}

// Heads a lenient parser would accept and a proxy behind it might read otherwise.
TEST_P(Framing, BadHeadsAre400AndClose) {
  EdgeTarget s(GetParam());
  const std::string body = completion("bad head", 2).dump();
  const std::string len = std::to_string(body.size());
  for (const std::string& head : {"Content-Length: +" + len + "\r\n",                     // a sign
                                  "Content-Length: " + len + "\r\nX-Folded: a\r\n b\r\n",  // obs-fold
                                  "Content-Length: " + len + "\r\nX-Cr: a\rb\r\n",         // bare CR
                                  "Content-Length: " + len + "\r\nX-Nul: a" + std::string(1, '\0') + "b\r\n",
                                  "Content-Length : " + len + "\r\n"}) {  // space before the colon
    RawConnection c(s.port);
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + head + "\r\n" + body));
    bool eof = false;
    std::string answer = c.read_until_close(5, &eof);
    EXPECT_EQ(count_status(answer, 400), 1) << head << answer;
    EXPECT_EQ(count_status(answer, 200), 0) << head << ": forwarded";
    EXPECT_TRUE(eof) << head << ": the connection stayed open";
  }
}

TEST_P(Framing, PipelinedRequestsAreAllAnswered) {
  EdgeTarget s(GetParam());
  std::string body = completion("pipe", 2).dump();
  std::string post = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body;
  RawConnection c(s.port);
  ASSERT_TRUE(c.send(post + "GET /health HTTP/1.1\r\nHost: t\r\n\r\n" + post +
                     "GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  bool eof = false;
  std::string answers = c.read_until_close(10, &eof);
  EXPECT_EQ(count_status(answers, 200), 4) << answers;
  EXPECT_TRUE(eof);
  // In order: the models list comes last.
  EXPECT_GT(answers.find("\"object\":\"list\""), answers.rfind("text_completion"));
}

TEST_P(Framing, HeadAndBodyDeadlines) {
  ApiServerConfig sc = Server::config();
  sc.header_timeout_s = 0.3;
  sc.body_timeout_s = 0.3;
  EdgeTarget s(GetParam(), sc);
  RawConnection head(s.port), body(s.port), silent(s.port);
  ASSERT_TRUE(head.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Le"));
  ASSERT_TRUE(body.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"mo"));
  Timer t;
  bool eof = false;
  EXPECT_EQ(count_status(head.read_until_close(5, &eof), 408), 1);
  EXPECT_TRUE(eof);
  EXPECT_EQ(count_status(body.read_until_close(5, &eof), 408), 1);
  EXPECT_TRUE(eof);
  EXPECT_EQ(silent.read_until_close(5, &eof), "");  // never sent a byte: just closed
  EXPECT_TRUE(eof);
  EXPECT_LT(t.seconds(), 3.0);
}

}  // namespace
}  // namespace distllm::serve::api
