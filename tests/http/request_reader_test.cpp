// A connection's bytes into requests, without sockets: pipelining, every split of
// the bytes, the screen before the body, the body limit, 100-continue.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "distllm/http/request_reader.h"

namespace distllm::http {
namespace {

struct Read {
  std::vector<std::string> requests;
  int refusal = 0;
  int heads = 0;
};

// Feeds `wire` `step` bytes at a time, as a socket would deliver it.
Read read(const std::string& wire, size_t step, ReaderLimits limits = {}, const RequestReader::Screen* screen = nullptr) {
  Read out;
  RequestReader r(limits, screen);
  for (size_t at = 0; at < wire.size() && out.refusal == 0; at += step) {
    r.append(std::string_view(wire).substr(at, step));
    for (bool more = true; more;) {
      switch (r.next()) {
        case RequestReader::Event::kNeedMore: more = false; break;
        case RequestReader::Event::kHeadDone: ++out.heads; break;
        case RequestReader::Event::kRequest: out.requests.push_back(r.take_request()); break;
        case RequestReader::Event::kError:
          out.refusal = r.error().status;
          more = false;
          break;
      }
    }
  }
  return out;
}

const std::string kPipelined =
    "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
    "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    "GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n";

TEST(HttpRequestReader, PipelinedRequestsComeOutOneByOneInAnySplit) {
  for (size_t step : {1u, 2u, 5u, 13u, 1000u}) {
    Read r = read(kPipelined, step);
    ASSERT_EQ(r.requests.size(), 4u) << step;
    EXPECT_EQ(r.refusal, 0);
    EXPECT_EQ(r.heads, 4);
    EXPECT_EQ(r.requests[0], "GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
    EXPECT_EQ(r.requests[1], "POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde");
    EXPECT_EQ(r.requests[2], "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
    EXPECT_EQ(r.requests[3], "GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n");
  }
}

TEST(HttpRequestReader, TheScreenRefusesBeforeTheBodyIsRead) {
  int screened = 0;
  const RequestReader::Screen screen = [&](const RequestHead& h) -> std::optional<FramingError> {
    ++screened;
    if (h.header("Authorization") == "Bearer k") return std::nullopt;
    return FramingError{401, "no key", "invalid_api_key"};
  };
  RequestReader r(ReaderLimits{}, &screen);
  r.append("POST /v1/x HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_EQ(r.next(), RequestReader::Event::kHeadDone);
  EXPECT_EQ(r.next(), RequestReader::Event::kRequest);
  r.take_request();
  // The body is never read: the refusal comes with only the head in.
  r.append("POST /v1/x HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n");
  EXPECT_EQ(r.next(), RequestReader::Event::kError);
  EXPECT_EQ(r.error().status, 401);
  EXPECT_EQ(r.next(), RequestReader::Event::kError) << "a refused connection stays refused";
  EXPECT_EQ(screened, 2);
}

TEST(HttpRequestReader, BodiesOverTheLimitAre413WhicheverWayTheyAreFramed) {
  ReaderLimits small{16384, 10};
  Read declared = read("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 1000, small);
  EXPECT_EQ(declared.refusal, 413);
  EXPECT_EQ(declared.heads, 0) << "refused on the head, before the body";
  // A chunked body is refused at the chunk that passes the limit, however it is split.
  for (size_t step : {1u, 3u, 1000u}) {
    Read chunked = read("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\nworld!\r\n0\r\n\r\n", step, small);
    EXPECT_EQ(chunked.refusal, 413) << step;
    EXPECT_TRUE(chunked.requests.empty());
  }
  EXPECT_EQ(read("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789", 4, small).requests.size(), 1u);
}

TEST(HttpRequestReader, BadFramingEndsTheConnection) {
  for (const char* bad : {"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
                          "POST / HTTP/1.1\r\nContent-Length: +65\r\n\r\n", "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
                          "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"}) {
    Read r = read(std::string("GET /ok HTTP/1.1\r\n\r\n") + bad, 7);
    EXPECT_EQ(r.requests.size(), 1u) << bad;
    EXPECT_EQ(r.refusal, 400) << bad;
  }
  // A NUL inside a header value (a C string cannot carry it: built with its length).
  const std::string nul("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 26);
  EXPECT_EQ(read(nul, 3).refusal, 400);
  EXPECT_EQ(read(std::string("GET /ok HTTP/1.1\r\n\r\n") + nul, 1000).requests.size(), 1u);
}

TEST(HttpRequestReader, ExpectContinueIsWantedOnlyBeforeTheBodyArrives) {
  RequestReader r(ReaderLimits{}, nullptr);
  r.append("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  ASSERT_EQ(r.next(), RequestReader::Event::kHeadDone);
  EXPECT_TRUE(r.wants_continue());
  EXPECT_TRUE(r.reading_body());
  r.append("{}");
  EXPECT_FALSE(r.wants_continue());
  EXPECT_EQ(r.next(), RequestReader::Event::kRequest);
  EXPECT_EQ(r.take_request(), "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_FALSE(r.has_input());
}

}  // namespace
}  // namespace distllm::http
