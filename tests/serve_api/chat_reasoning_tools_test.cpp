// Reasoning, tool calls and chat_template_kwargs over real sockets: the server on a
// scripted model (echo_runner.h answers with the last user message, one byte per
// token), so each family's real output format reaches the server split at every
// byte. Streamed and non-streamed responses must say the same thing.
#include <gtest/gtest.h>

#include <thread>

#include "distllm/serve/api/http_server.h"
#include "serve_api/api_fixture.h"
#include "serve_api/echo_runner.h"

namespace distllm::serve::api {
namespace {

using namespace test_support;
using serve::testing::EchoRunner;

struct EchoServer {
  ByteCodec codec;
  EchoRunner runner;
  ServeMetrics metrics{"test-model"};
  Engine engine;
  ChatFormatter chat;
  ApiServer server;
  int port = 0;
  std::thread thread;
  OpenAIClient client;

  EchoServer(ApiServerConfig sc, ChatFormatter formatter = ChatFormatter::default_format())
      : engine(runner, codec, default_engine(), metrics), chat(std::move(formatter)), server(engine, chat, metrics, sc),
        port(server.bind()), client("http://127.0.0.1:" + std::to_string(port), "", 30) {
    engine.start();
    thread = std::thread([this] { server.serve(); });
  }
  ~EchoServer() {
    server.stop();
    thread.join();
    engine.stop();
  }

  static ApiServerConfig config(ReasoningFormat reasoning, ToolCallFormat tools = ToolCallFormat::kNone) {
    ApiServerConfig c = Server::config();
    c.reasoning_format = reasoning;
    c.tool_call_format = tools;
    return c;
  }

  Json complete(const Json& body) {
    HttpResult r = client.post("/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return Json::parse(r.body);
  }
};

// A streamed chat answer put back together: reasoning, content and the tool calls
// accumulated from their deltas the way OpenAI's clients do.
struct Assembled {
  std::string reasoning, content, finish;
  Json calls = Json::array();
  std::vector<Json> chunks;
  size_t first_call_chunk = SIZE_MAX, last_content_chunk = 0, content_chunks = 0, reasoning_chunks = 0;
};

Assembled assemble(EchoServer& s, Json body) {
  body["stream"] = true;
  Stream st = stream(s.client, "/v1/chat/completions", body);
  EXPECT_EQ(st.result.status, 200) << st.result.body;
  Assembled a;
  a.chunks = st.chunks;
  for (size_t k = 0; k < st.chunks.size(); ++k) {
    const Json& c = st.chunks[k];
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const Json& ch = c["choices"][0];
    if (ch["finish_reason"].is_string()) a.finish = ch["finish_reason"];
    const Json& d = ch["delta"];
    if (d.contains("reasoning_content")) {
      a.reasoning += d["reasoning_content"].get<std::string>();
      ++a.reasoning_chunks;
    }
    if (d.contains("content") && !d["content"].get<std::string>().empty()) {
      a.content += d["content"].get<std::string>();
      ++a.content_chunks;
      a.last_content_chunk = k;
    }
    if (d.contains("tool_calls")) {
      a.first_call_chunk = std::min(a.first_call_chunk, k);
      for (const Json& tc : d["tool_calls"]) {
        const size_t i = tc["index"];
        if (a.calls.size() <= i) a.calls.push_back(Json{{"id", ""}, {"type", ""}, {"function", {{"name", ""}, {"arguments", ""}}}});
        Json& call = a.calls[i];
        if (tc.contains("id")) call["id"] = tc["id"];
        if (tc.contains("type")) call["type"] = tc["type"];
        if (tc.contains("function")) {
          if (tc["function"].contains("name")) call["function"]["name"] = call["function"]["name"].get<std::string>() + tc["function"]["name"].get<std::string>();
          if (tc["function"].contains("arguments"))
            call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
      }
    }
  }
  return a;
}

Json weather_tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "get_time"}}])");
}

TEST(ChatReasoning, Qwen3ThinkingIsReasoningContentStreamedOrNot) {
  EchoServer s(EchoServer::config(ReasoningFormat::kQwen3));
  const std::string script = "<think>\nSeventeen times three.\n</think>\n\nIt is 51.";
  Json m = s.complete(chat_request(script, 200))["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "\nSeventeen times three.\n");
  EXPECT_EQ(m["content"], "\n\nIt is 51.");
  Assembled a = assemble(s, chat_request(script, 200));
  EXPECT_EQ(a.reasoning, "\nSeventeen times three.\n");
  EXPECT_EQ(a.content, "\n\nIt is 51.");
  EXPECT_EQ(a.finish, "stop");
  EXPECT_GE(a.reasoning_chunks, 10u) << "the thinking streams as it comes";
  EXPECT_GE(a.content_chunks, 5u);
  for (const Json& c : a.chunks) EXPECT_EQ(c.dump().find("think>"), std::string::npos) << "a tag leaked: " << c.dump();
  // No opening tag: all answer (enable_thinking false); content only.
  m = s.complete(chat_request("Plain answer.", 200))["choices"][0]["message"];
  EXPECT_TRUE(m["reasoning_content"].is_null());
  EXPECT_EQ(m["content"], "Plain answer.");
  // Cut by max_tokens inside the thinking: all of it is thinking, streamed and not.
  Json cut = s.complete(chat_request(script, 13));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(cut["choices"][0]["message"]["reasoning_content"], "\nSeven");
  EXPECT_TRUE(cut["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(assemble(s, chat_request(script, 13)).reasoning, "\nSeven");
}

TEST(ChatReasoning, DeepSeekR1NeedsNoOpeningTag) {
  EchoServer s(EchoServer::config(ReasoningFormat::kDeepSeekR1));
  Json m = s.complete(chat_request("Think it through.</think>Done.", 200))["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Think it through.");
  EXPECT_EQ(m["content"], "Done.");
  Assembled a = assemble(s, chat_request("Think it through.</think>Done.", 200));
  EXPECT_EQ(a.reasoning, "Think it through.");
  EXPECT_EQ(a.content, "Done.");
  // Without a reasoning parser the tags stay in the content, and there is no reasoning_content.
  EchoServer plain(EchoServer::config(ReasoningFormat::kNone));
  m = plain.complete(chat_request("<think>x</think>y", 200))["choices"][0]["message"];
  EXPECT_EQ(m["content"], "<think>x</think>y");
  EXPECT_FALSE(m.contains("reasoning_content"));
}

// Each family's tool-call format, streamed and not: the same calls, content before
// them streamed ahead of them, OpenAI's streamed shape (a name delta, then arguments).
TEST(ChatToolCalls, EveryParserOverRealSockets) {
  struct Case {
    ToolCallFormat format;
    std::string script, content;
    size_t id_size;
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::kHermes,
       "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
       "Checking.\n", 29},
      {ToolCallFormat::kLlama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
       "", 29},
      {ToolCallFormat::kMistral,
       "Sure. [TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
       "Sure. ", 9},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.script);
    EchoServer s(EchoServer::config(ReasoningFormat::kNone, c.format));
    const Json body = chat_request(c.script, 400, {{"tools", weather_tools()}});
    Json choice = s.complete(body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    Json m = choice["message"];
    if (c.content.empty()) {
      EXPECT_TRUE(m["content"].is_null()) << m.dump();
    } else {
      EXPECT_EQ(m["content"], c.content);
    }
    ASSERT_EQ(m["tool_calls"].size(), 2u) << m.dump();
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
    EXPECT_EQ(m["tool_calls"][1]["function"]["name"], "get_time");
    EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
    EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().size(), c.id_size);

    Assembled a = assemble(s, body);
    EXPECT_EQ(a.finish, "tool_calls");
    EXPECT_EQ(a.content, c.content);
    ASSERT_EQ(a.calls.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(a.calls[i]["type"], "function");
      EXPECT_EQ(a.calls[i]["id"].get<std::string>().size(), c.id_size);
      EXPECT_EQ(a.calls[i]["function"], m["tool_calls"][i]["function"]);
    }
    if (!c.content.empty()) {
      EXPECT_GE(a.content_chunks, 3u) << "content before the call streams as it comes";
      EXPECT_LT(a.last_content_chunk, a.first_call_chunk);
    }
    // The name comes in its own delta, the arguments in the next.
    const Json& first = a.chunks[a.first_call_chunk]["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(first["function"]["arguments"], "");
    EXPECT_EQ(first["function"]["name"], "get_weather");
  }
}

// With a reasoning parser, calls are parsed from the answer only: a call written
// in the thinking is thinking.
TEST(ChatToolCalls, CallsInTheThinkingAreNotCalls) {
  EchoServer s(EchoServer::config(ReasoningFormat::kQwen3, ToolCallFormat::kHermes));
  const std::string script =
      "<think>Maybe <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>.</think>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  const Json body = chat_request(script, 400, {{"tools", weather_tools()}});
  Json m = s.complete(body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Maybe <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>.");
  EXPECT_TRUE(m["content"].is_null()) << m.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  Assembled a = assemble(s, body);
  EXPECT_EQ(a.reasoning, m["reasoning_content"]);
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0]["function"], m["tool_calls"][0]["function"]);
  EXPECT_EQ(a.finish, "tool_calls");
}

// chat_template_kwargs reach the template as variables (the echo model repeats the
// user turn the template wrote); the request's own fields cannot be replaced.
TEST(ChatTemplateKwargs, ReachTheTemplateAndAreChecked) {
  const char* kTemplate =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
      "{% if m.role == 'user' and shout is defined and shout %} (LOUD{{ '!' * level }}){% endif %}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  EchoServer s(EchoServer::config(ReasoningFormat::kNone),
               ChatFormatter::from_template(kTemplate, "kwargs test", "", ""));
  Json plain = s.complete(chat_request("hi", 50));
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "hi");
  Json loud = s.complete(chat_request("hi", 50, {{"chat_template_kwargs", {{"shout", true}, {"level", 3}}}}));
  EXPECT_EQ(loud["choices"][0]["message"]["content"], "hi (LOUD!!!)");
  expect_error(s.client.post("/v1/chat/completions", chat_request("hi", 5, {{"chat_template_kwargs", 3}}).dump()), 400,
               "'chat_template_kwargs' must be an object");
  expect_error(s.client.post("/v1/chat/completions",
                             chat_request("hi", 5, {{"chat_template_kwargs", {{"messages", Json::array()}}}}).dump()),
               400, "may not set 'messages'");
  expect_error(s.client.post("/v1/chat/completions",
                             chat_request("hi", 5, {{"continue_final_message", true}, {"add_generation_prompt", true}}).dump()),
               400, "cannot both be true");
}

// continue_final_message: the prompt ends inside the last (assistant) message and
// the model continues it; without add_generation_prompt there is no new turn.
TEST(ChatTemplateKwargs, ContinueFinalMessage) {
  ChatFormatter f = ChatFormatter::default_format();
  Json messages = Json::array({{{"role", "user"}, {"content", "Count"}}, {{"role", "assistant"}, {"content", "1, 2,"}}});
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  o.continue_final_message = true;
  EXPECT_EQ(f.apply(messages, Json(), o), "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n1, 2,");
  o.add_generation_prompt = true;
  EXPECT_THROW(f.apply(messages, Json(), o), TemplateError);
  EchoServer s(EchoServer::config(ReasoningFormat::kNone));
  Json body = {{"model", "test-model"}, {"messages", messages}, {"max_tokens", 20}, {"temperature", 0}, {"continue_final_message", true}};
  HttpResult r = s.client.post("/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
}

}  // namespace
}  // namespace distllm::serve::api
