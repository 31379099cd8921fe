// The parts of the HTTP edge both servers share: the API key check, the OpenAI
// error object, the Prometheus writer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "distllm/http/api_key.h"
#include "distllm/http/openai_error.h"
#include "distllm/http/prometheus.h"

namespace distllm::http {
namespace {

TEST(HttpApiKey, GuardsApiPathsOnlyAndComparesExactly) {
  ApiKeyCheck none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.allows("/v1/completions", ""));
  ApiKeyCheck key("sekret");
  for (const char* open : {"/health", "/metrics", "/", "/v1"}) EXPECT_TRUE(key.allows(open, "")) << open;
  for (const char* guarded : {"/v1/completions", "/v1/models", "/admin/reload", "/admin/replicas", "/internal/kv/prefill"}) {
    EXPECT_FALSE(key.allows(guarded, "")) << guarded;
    EXPECT_FALSE(key.allows(guarded, "Bearer sekreT")) << guarded;
    EXPECT_FALSE(key.allows(guarded, "Bearer sekret ")) << guarded;
    EXPECT_FALSE(key.allows(guarded, "sekret")) << guarded;
    EXPECT_TRUE(key.allows(guarded, "Bearer sekret")) << guarded;
  }
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("a", "ab"));
}

TEST(HttpOpenAIError, TypeFollowsTheStatusAndStreamsEndWithDone) {
  using Json = nlohmann::ordered_json;
  Json e = openai_error(404, "no such model", "model", "model_not_found");
  EXPECT_EQ(e.dump(), R"({"error":{"message":"no such model","type":"not_found_error","param":"model","code":"model_not_found"}})");
  EXPECT_EQ(openai_error(401, "x")["error"]["type"], "authentication_error");
  EXPECT_EQ(openai_error(429, "x")["error"]["type"], "rate_limit_error");
  EXPECT_EQ(openai_error(503, "x")["error"]["type"], "server_error");
  EXPECT_EQ(openai_error(413, "x")["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(openai_error(400, "x")["error"]["param"].is_null());
  EXPECT_NE(openai_error_text(500, std::string("bad \xff utf-8")).find("bad"), std::string::npos);  // never throws
  EXPECT_EQ(openai_error_events(502, "gone", "upstream_failed"),
            "data: {\"error\":{\"message\":\"gone\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_failed\"}}"
            "\n\ndata: [DONE]\n\n");
}

TEST(HttpPrometheus, FamiliesSamplesAndHistogramsWithAndWithoutLabels) {
  Histogram h({0.5, 1});
  h.observe(0.5);
  h.observe(3);
  PrometheusText t;
  t.counter("a_total", "A.", 3);
  t.gauge("b", "B.", 0.1, "x=\"1\"");
  t.histogram("c_seconds", "C.", h);
  t.histogram("d_seconds", "D.", h, "m=\"z\"");
  EXPECT_EQ(t.text(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 3\n"
            "# HELP b B.\n# TYPE b gauge\nb{x=\"1\"} 0.1\n"
            "# HELP c_seconds C.\n# TYPE c_seconds histogram\n"
            "c_seconds_bucket{le=\"0.5\"} 1\nc_seconds_bucket{le=\"1\"} 1\nc_seconds_bucket{le=\"+Inf\"} 2\n"
            "c_seconds_sum 3.5\nc_seconds_count 2\n"
            "# HELP d_seconds D.\n# TYPE d_seconds histogram\n"
            "d_seconds_bucket{le=\"0.5\",m=\"z\"} 1\nd_seconds_bucket{le=\"1\",m=\"z\"} 1\n"
            "d_seconds_bucket{le=\"+Inf\",m=\"z\"} 2\nd_seconds_sum{m=\"z\"} 3.5\nd_seconds_count{m=\"z\"} 2\n");
  EXPECT_EQ(prometheus_number(0.1), "0.1");
  for (double v : {2560.0, 1e-7, 0.3, 123456.789}) EXPECT_EQ(std::stod(prometheus_number(v)), v);
}

}  // namespace
}  // namespace distllm::http
