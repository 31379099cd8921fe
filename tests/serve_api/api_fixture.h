// What the HTTP API tests share: the server in-process around the test runner
// (so tests can look at the engine), request builders, and checks.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/serve/api/http_server.h"
#include "distllm/client/openai_client.h"
#include "serve/test_codec.h"
#include "serve/test_runner.h"

namespace distllm::serve::api::test_support {

using Json = nlohmann::ordered_json;
using client::HttpResult;
using client::OpenAIClient;
using client::SseParser;
using serve::testing::ByteCodec;
using serve::testing::TestRunner;
using serve::testing::TestRunnerOptions;

inline EngineConfig default_engine() {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 256;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 64;
  c.max_queued_requests = 16;
  c.check_invariants = true;
  return c;
}

struct Server {
  ByteCodec codec;
  TestRunner runner;
  ServeMetrics metrics{"test-model"};
  Engine engine;
  ChatFormatter chat = ChatFormatter::default_format();
  ApiServer server;
  int port = 0;
  std::thread thread;
  OpenAIClient client;

  explicit Server(EngineConfig ec = default_engine(), ApiServerConfig sc = config(), TestRunnerOptions ro = {},
                  ByteCodec c = ByteCodec())
      : codec(c),
        runner(ro), engine(runner, codec, ec, metrics), server(engine, chat, metrics, sc), port(server.bind()),
        client("http://127.0.0.1:" + std::to_string(port), sc.api_key, 30) {
    engine.start();
    thread = std::thread([this] { server.serve(); });
  }
  ~Server() {
    server.stop();
    thread.join();
    engine.stop();
  }
  static ApiServerConfig config() {
    ApiServerConfig c;
    c.port = 0;
    c.model_name = "test-model";
    return c;
  }
  // What greedy decoding gives after `prompt`'s ids: a chat prompt's (encode) by
  // default, a completion's text prompt's (encode_prompt) with `as_completion`.
  std::string expected_text(const std::string& prompt, int n, bool as_completion = false) {
    std::vector<int32_t> ids = as_completion ? codec.encode_prompt(prompt) : codec.encode(prompt);
    return serve::testing::decode_all(codec, runner.reference_greedy(ids, n));
  }
};

inline Json completion(const std::string& prompt, int max_tokens, Json extra = Json::object()) {
  Json j = {{"model", "test-model"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

inline Json chat_request(const std::string& content, int max_tokens, Json extra = Json::object()) {
  Json j = {{"model", "test-model"},
            {"messages", Json::array({{{"role", "user"}, {"content", content}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

struct Stream {
  HttpResult result;
  std::vector<Json> chunks;
  std::string text;  // all choice-0 text / content
};

inline Stream stream(const OpenAIClient& c, const std::string& path, const Json& body) {
  Stream s;
  s.result = c.post_stream(path, body.dump(), [&](const std::string& data) {
    Json j = Json::parse(data);
    s.chunks.push_back(j);
    if (j.contains("choices"))
      for (auto& ch : j["choices"]) {
        if (ch.contains("text")) s.text += ch["text"].get<std::string>();
        if (ch.contains("delta") && ch["delta"].contains("content")) s.text += ch["delta"]["content"].get<std::string>();
      }
    return true;
  });
  return s;
}

inline void expect_error(const HttpResult& r, int status, const std::string& needle) {
  EXPECT_EQ(r.status, status) << r.body << r.transport_error;
  Json j = Json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k << " in " << r.body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
}

}  // namespace distllm::serve::api::test_support
