// vLLM's chat template fields in a chat request (openai_protocol.h): what they set,
// their defaults, and a 400 naming the field for each bad use.
#include <gtest/gtest.h>

#include "distllm/serve/api/openai_protocol.h"

namespace distllm::serve::api {
namespace {

Json chat(Json extra) {
  Json j = {{"model", "m"}, {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

std::string error_param(const Json& body) {
  try {
    parse_chat_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param() + ": " + e.what();
  }
  return "";
}

TEST(ChatTemplateFields, Defaults) {
  ChatRequest r = parse_chat_request(chat(Json::object()));
  EXPECT_TRUE(r.render.add_generation_prompt);
  EXPECT_FALSE(r.render.continue_final_message);
  EXPECT_TRUE(r.render.kwargs.empty());
  EXPECT_TRUE(r.render.documents.is_null());
}

TEST(ChatTemplateFields, KwargsDocumentsAndContinuation) {
  ChatRequest r = parse_chat_request(chat({{"chat_template_kwargs", {{"enable_thinking", false}, {"date_string", "1 Jan 2025"}}},
                                           {"documents", Json::array({{{"title", "a"}, {"text", "b"}}})}}));
  EXPECT_EQ(r.render.kwargs["enable_thinking"], false);
  EXPECT_EQ(r.render.kwargs["date_string"], "1 Jan 2025");
  EXPECT_EQ(r.render.documents.size(), 1u);
  // continue_final_message turns the generation prompt off unless it is asked for.
  r = parse_chat_request(chat({{"continue_final_message", true}}));
  EXPECT_TRUE(r.render.continue_final_message);
  EXPECT_FALSE(r.render.add_generation_prompt);
  r = parse_chat_request(chat({{"add_generation_prompt", false}}));
  EXPECT_FALSE(r.render.add_generation_prompt);
}

TEST(ChatTemplateFields, BadUsesAre400sNamingTheField) {
  EXPECT_EQ(error_param(chat({{"chat_template_kwargs", "x"}})),
            "chat_template_kwargs: 'chat_template_kwargs' must be an object, got a string");
  for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt", "continue_final_message"}) {
    EXPECT_EQ(error_param(chat({{"chat_template_kwargs", {{reserved, 1}}}})),
              std::string("chat_template_kwargs: 'chat_template_kwargs' may not set '") + reserved +
                  "': give it as the request's own field");
  }
  EXPECT_EQ(error_param(chat({{"continue_final_message", true}, {"add_generation_prompt", true}})),
            "continue_final_message: 'continue_final_message' and 'add_generation_prompt' cannot both be true");
  EXPECT_EQ(error_param(chat({{"continue_final_message", "yes"}})),
            "continue_final_message: 'continue_final_message' must be a boolean, got a string");
  EXPECT_EQ(error_param(chat({{"documents", {{"a", 1}}}})), "documents: 'documents' must be an array, got an object");
  EXPECT_EQ(error_param(chat({{"documents", Json::array({"text"})}})), "documents: 'documents' entries must be objects");
}

}  // namespace
}  // namespace distllm::serve::api
