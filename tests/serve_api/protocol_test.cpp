#include <gtest/gtest.h>

#include "distllm/http/openai_error.h"

#include <fstream>
#include <sstream>

#include "distllm/serve/api/openai_protocol.h"

namespace distllm::serve::api {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string body_error(const std::string& body) {
  try {
    parse_body(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "";
}

// Found by fuzz_openai_request: a number too large for a double is nlohmann's
// out_of_range, not a parse_error; it escaped as a 500.
TEST(Protocol, NumberOverflowIsA400) {
  EXPECT_EQ(body_error("[1e999]"), "invalid JSON in the request body: number overflow parsing '1e999'");
  std::string crash = read_file(std::string(DISTLLM_SOURCE_DIR) + "/tests/serve_api/fuzz_regressions/openai_request_number_overflow");
  ASSERT_FALSE(crash.empty());
  EXPECT_NE(body_error(crash).find("invalid JSON in the request body: "), std::string::npos);
}

TEST(Protocol, ErrorBodiesHaveOpenAIShape) {
  Json e = http::openai_error(429, "busy", "", "rate_limit_exceeded");
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_EQ(e["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(http::openai_error(400, "x", "max_tokens")["error"]["param"], "max_tokens");
  EXPECT_EQ(http::openai_error(503, "x")["error"]["type"], "server_error");
}

TEST(Protocol, TokenDisplayReplacesBrokenUtf8) {
  EXPECT_EQ(token_display("abc"), "abc");
  EXPECT_EQ(token_display("\xe4\xb8"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(token_display("\xe4\xb8\x96"), "\xe4\xb8\x96");
  EXPECT_EQ(token_display("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
}

TEST(Protocol, ChatContentPartsAreJoined) {
  Json body = Json::parse(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                                           {"role": "assistant", "content": null}]})");
  ChatRequest r = parse_chat_request(body);
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_EQ(r.messages[1]["content"], "");
  Json image = Json::parse(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})");
  EXPECT_THROW(parse_chat_request(image), ApiError);
}

TEST(Protocol, GenerationRequestsPerChoice) {
  SamplingFields s;
  s.n = 3;
  s.seed = 9;
  s.temperature = 0.7;
  auto reqs = make_generation_requests(s, {1, 2}, 5, 2);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[2].sampling.seed_stream, 2u);
  EXPECT_EQ(*reqs[2].seed, 9u);
  EXPECT_EQ(reqs[1].max_tokens, 5);
  EXPECT_EQ(reqs[0].sampling.logprobs, 2);
  EXPECT_FLOAT_EQ(reqs[0].sampling.temperature, 0.7f);
}

}  // namespace
}  // namespace distllm::serve::api
