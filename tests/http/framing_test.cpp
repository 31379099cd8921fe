// The framing rules without sockets: heads, chunked bodies fed in every split.
#include <gtest/gtest.h>

#include "distllm/http/framing.h"

namespace distllm::http {
namespace {

HeadStatus parse(const std::string& text, RequestHead& head, FramingError& err, size_t* len = nullptr) {
  size_t n = 0;
  HeadStatus st = parse_request_head(text, 16384, head, n, err);
  if (len) *len = n;
  return st;
}

TEST(HttpFraming, HeadsAreParsedAndJudged) {
  RequestHead h;
  FramingError err;
  size_t len = 0;
  std::string text = "\r\nPOST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length:  12 \r\n\r\nBODY";
  ASSERT_EQ(parse(text, h, err, &len), HeadStatus::kComplete) << err.message;
  EXPECT_EQ(text.substr(len), "BODY");
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.path(), "/v1/completions");
  EXPECT_EQ(h.content_length, 12u);
  EXPECT_EQ(h.header("content-length"), "12");
  EXPECT_TRUE(h.keep_alive);
  // Bare LF line ends; HTTP/1.0 closes unless asked; Expect.
  ASSERT_EQ(parse("GET / HTTP/1.0\nExpect: 100-continue\n\n", h, err), HeadStatus::kComplete);
  EXPECT_FALSE(h.keep_alive);
  EXPECT_TRUE(h.expect_continue);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n", h, err), HeadStatus::kIncomplete);
  struct Bad {
    const char* head;
    int status;
  };
  for (Bad b : {Bad{"GET / HTTP/2.0\r\n\r\n", 505}, Bad{"GET /\r\n\r\n", 400}, Bad{"G(T / HTTP/1.1\r\n\r\n", 400},
                Bad{"GET / HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400}, Bad{"GET / HTTP/1.1\r\nBad Name: 1\r\n\r\n", 400},
                Bad{"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},
                Bad{"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
                Bad{"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
                Bad{"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
                Bad{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},
                Bad{"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
                Bad{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400}}) {
    EXPECT_EQ(parse(b.head, h, err), HeadStatus::kError) << b.head;
    EXPECT_EQ(err.status, b.status) << b.head << ": " << err.message;
  }
  // Same length twice (or as a list) is one length.
  ASSERT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\n", h, err), HeadStatus::kComplete);
  EXPECT_EQ(h.content_length, 3u);
  // Too long: known before the head ends.
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX: " + std::string(20000, 'a'), h, err), HeadStatus::kError);
  EXPECT_EQ(err.status, 431);
}

// Feeds `wire` to a decoder `step` bytes at a time, as a connection buffer would.
ChunkedDecoder::Status decode(const std::string& wire, size_t step, size_t max_body, std::string& body,
                              std::string& rest, FramingError& err) {
  ChunkedDecoder d;
  std::string buffer;
  ChunkedDecoder::Status st = ChunkedDecoder::Status::kNeedMore;
  for (size_t at = 0; at < wire.size() && st == ChunkedDecoder::Status::kNeedMore; at += step) {
    buffer += wire.substr(at, step);
    size_t used = 0;
    st = d.feed(buffer, used, body, max_body, err);
    buffer.erase(0, used);
    if (st == ChunkedDecoder::Status::kDone) rest = buffer + wire.substr(std::min(wire.size(), at + step));
  }
  return st;
}

TEST(HttpFraming, ChunkedBodiesDecodeInAnySplit) {
  std::string wire = "5;ext=1\r\nhello\r\n1A\r\n" + std::string(26, 'z') + "\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  for (size_t step : {1u, 2u, 3u, 7u, 1000u}) {
    std::string body, rest;
    FramingError err;
    ASSERT_EQ(decode(wire, step, 1000, body, rest, err), ChunkedDecoder::Status::kDone) << step << err.message;
    EXPECT_EQ(body, "hello" + std::string(26, 'z'));
    EXPECT_EQ(rest, "NEXT") << step;
  }
  std::string body, rest;
  FramingError err;
  EXPECT_EQ(decode(wire, 3, 20, body, rest, err), ChunkedDecoder::Status::kError);  // the 26-byte chunk passes 20
  EXPECT_EQ(err.status, 413);
  EXPECT_LE(body.size(), 20u);
  body.clear();
  EXPECT_EQ(decode("5\r\nhelloXX\r\n", 1, 100, body, rest, err), ChunkedDecoder::Status::kError);
  EXPECT_EQ(err.status, 400);
  body.clear();
  EXPECT_EQ(decode("zz\r\n", 1, 100, body, rest, err), ChunkedDecoder::Status::kError);
  body.clear();
  EXPECT_EQ(decode(std::string(2000, '1'), 100, 100, body, rest, err), ChunkedDecoder::Status::kError);  // endless size line
}

TEST(HttpFraming, CanonicalRequestHasOneLengthAndJsonForForms) {
  RequestHead h;
  FramingError err;
  ASSERT_EQ(parse("POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
                  "Content-Type: application/x-www-form-urlencoded\r\n\r\n",
                  h, err),
            HeadStatus::kComplete);
  EXPECT_EQ(canonical_request(h, "{}"),
            "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_EQ(parse("GET /health HTTP/1.1\r\nHost: a\r\n\r\n", h, err), HeadStatus::kComplete);
  EXPECT_EQ(canonical_request(h, ""), "GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
}

}  // namespace
}  // namespace distllm::http
