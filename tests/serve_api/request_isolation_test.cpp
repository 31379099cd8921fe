// One request must never stop the server (over real sockets): a constraint that
// cannot be followed fails that request alone and the next one is served; hostile
// constraints and sampling values are fast 400s naming the field.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "serve_api/api_fixture.h"

namespace distllm::serve::api {
namespace {

using namespace test_support;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void expect_server_serves(Server& s) {
  EXPECT_EQ(s.client.get("/health").status, 200);
  HttpResult ok = s.client.post("/v1/completions", completion("hello there", 8).dump());
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(Json::parse(ok.body)["choices"][0]["text"], s.expected_text("hello there", 8));
  EXPECT_TRUE(s.engine.alive());
}

// A bounded repetition of a group of `.*`: it compiles, but at temperature 1 its
// parse stacks multiply past the matcher's limit within a few tokens. That used to
// stop the engine loop: "the engine stopped", then 503 for everyone, for good.
TEST(RequestIsolation, AGrammarThatCannotBeFollowedFailsAloneAndTheServerGoesOn) {
  Server s;
  const Json constraints[] = {
      {{"guided_regex", "(.*.*){10}"}},
      {{"guided_json", {{"type", "string"}, {"pattern", "^(.*.*){10}$"}}}},
  };
  for (const Json& constraint : constraints) {
    SCOPED_TRACE(constraint.dump());
    Json body = completion("ambiguous: ", 200, {{"temperature", 1.0}, {"seed", 1}});
    for (auto& [k, v] : constraint.items()) body[k] = v;
    expect_error(s.client.post("/v1/completions", body.dump()), 500, "grammar cannot be followed");
    expect_server_serves(s);
    // Streamed: the error travels in the choice's last chunk and the stream ends.
    body["stream"] = true;
    Stream st = stream(s.client, "/v1/completions", body);
    ASSERT_EQ(st.result.status, 200) << st.result.body;
    ASSERT_FALSE(st.chunks.empty());
    const Json& last = st.chunks.back();
    ASSERT_TRUE(last.contains("error")) << last.dump();
    EXPECT_NE(last["error"]["message"].get<std::string>().find("too ambiguous"), std::string::npos) << last.dump();
    EXPECT_EQ(last["choices"][0]["finish_reason"], "error") << last.dump();
    expect_server_serves(s);
  }
}

// ~1 MB of tool parameters (30,000 optional properties): the forced tool call's
// grammar is one the matcher cannot follow. It used to take 9-16 s, and with
// tool_choice "required" it was accepted and later failed as a 500.
TEST(RequestIsolation, AMegabyteToolSchemaIsAFast400) {
  ApiServerConfig sc = Server::config();
  sc.max_body_bytes = 8 << 20;
  Server s(default_engine(), sc);
  Json props = Json::object();
  for (int i = 0; i < 30000; ++i) {
    std::string name = "p";
    name += std::to_string(100000 + i);
    props[name] = {{"type", "string"}};
  }
  const Json tools = Json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"properties", props}}}}}}});
  for (const Json& choice : {Json("required"), Json{{"type", "function"}, {"function", {{"name", "f"}}}}}) {
    SCOPED_TRACE(choice.dump());
    Json body = chat_request("call it", 200, {{"tools", tools}, {"tool_choice", choice}});
    ASSERT_GT(body.dump().size(), 800000u);
    auto t0 = std::chrono::steady_clock::now();
    HttpResult r = s.client.post("/v1/chat/completions", body.dump());
    const double took = seconds_since(t0);
    expect_error(r, 400, "invalid 'tool_choice'");
    EXPECT_EQ(Json::parse(r.body)["error"]["param"], "tool_choice") << r.body;
    EXPECT_LT(took, 4.0) << "refusing took " << took << " s";
  }
  expect_server_serves(s);
}

// 1e-300 is 0 as a float: every seen token's logit became infinite and the
// request ended after one token with finish_reason "stop".
TEST(RequestIsolation, ARepetitionPenaltyThatMakesLogitsInfiniteIs400) {
  Server s;
  for (double penalty : {1e-300, 1e-40, 1e-7}) {
    expect_error(s.client.post("/v1/completions", completion("aaaa", 8, {{"repetition_penalty", penalty}}).dump()), 400,
                 "'repetition_penalty' must be at least");
  }
  HttpResult ok = s.client.post("/v1/completions", completion("aaaa", 8, {{"repetition_penalty", 1e-6}}).dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  expect_server_serves(s);
}

}  // namespace
}  // namespace distllm::serve::api
