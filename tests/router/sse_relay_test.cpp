// The router's event relay without sockets: whole events only, in any split of
// the bytes, [DONE] noticed, and a clean ending for a stream that broke off.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "distllm/router/sse_relay.h"

namespace distllm::router {
namespace {

std::string relay_all(SseRelay& r, const std::string& wire, size_t step) {
  std::string out;
  for (size_t at = 0; at < wire.size(); at += step) r.feed(std::string_view(wire).substr(at, step), out);
  return out;
}

TEST(RouterSseRelay, RelaysWholeEventsInAnySplit) {
  const std::string events = "data: {\"a\":1}\n\n: comment\r\n\r\ndata: two\rdata: lines\r\r";
  const std::string wire = events + "data: {\"partial\"";
  for (size_t step : {1u, 2u, 3u, 7u, 1000u}) {
    SseRelay r;
    EXPECT_EQ(relay_all(r, wire, step), events) << step;
    EXPECT_FALSE(r.done());
    EXPECT_EQ(r.relayed(), events.size());
  }
}

TEST(RouterSseRelay, NoticesDone) {
  for (const char* done : {"data: [DONE]\n\n", "data:[DONE]\r\n\r\n", "event: x\ndata: [DONE]\n\n"}) {
    SseRelay r;
    std::string out = relay_all(r, std::string("data: {}\n\n") + done, 1);
    EXPECT_TRUE(r.done()) << done;
  }
  SseRelay r;
  relay_all(r, "data: [DONE] \n\ndata: [DONE]", 4);  // not [DONE], and an unfinished one
  EXPECT_FALSE(r.done());
}

TEST(RouterSseRelay, ABrokenStreamEndsWithAnErrorEventAndDone) {
  SseRelay r;
  EXPECT_EQ(relay_all(r, "data: {\"x\":1}\n\ndata: {\"cut", 5), "data: {\"x\":1}\n\n");
  const std::string ending = r.broken_ending(502, "replica gone", "replica_stream_broken");
  ASSERT_EQ(ending.rfind("data: ", 0), 0u) << ending;
  const size_t end = ending.find("\n\n");
  nlohmann::json e = nlohmann::json::parse(ending.substr(6, end - 6));
  EXPECT_EQ(e["error"]["message"], "replica gone");
  EXPECT_EQ(e["error"]["code"], "replica_stream_broken");
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(ending.substr(end + 2), "data: [DONE]\n\n");
  // Whatever the relay passed through, what the client gets ends properly.
  SseRelay client;
  std::string seen;
  client.feed("data: {\"x\":1}\n\n" + ending, seen);
  EXPECT_TRUE(client.done());
}

TEST(RouterSseRelay, PassesThroughWhatIsNotAnEventStreamWithinABound) {
  SseRelay r;
  std::string out;
  const std::string blob(SseRelay::kMaxPendingBytes + 10, 'x');
  r.feed(blob, out);
  EXPECT_EQ(out, blob) << "buffered past the bound";
  // Ended mid-"event": the error event still starts on its own.
  EXPECT_EQ(r.broken_ending(502, "m", "c").rfind("\n\ndata: {", 0), 0u);
}

}  // namespace
}  // namespace distllm::router
