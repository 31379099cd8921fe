#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "distllm/serve/chat_formatter.h"
#include "distllm/serve/jinja/chat_template.h"
#include "distllm/serve/jinja/template_json.h"
#include "serve/chat_template_clock.h"

namespace distllm::serve {
namespace {

const std::string kDir = std::string(DISTLLM_SOURCE_DIR) + "/tests/serve/chat_templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string render(const std::string& src, const nlohmann::ordered_json& vars) {
  return ChatTemplate::parse(src, "test").render(template_value_from_json(vars));
}

// Every template x conversation, compared with what Jinja2 (set up as Hugging Face
// sets it up) rendered: expected.json, written by make_expected.py.
TEST(ChatTemplate, MatchesJinja2OnRealTemplates) {
  auto conversations = nlohmann::ordered_json::parse(read_file(kDir + "conversations.json"));
  auto expected = nlohmann::ordered_json::parse(read_file(kDir + "expected.json"));
  std::map<std::string, nlohmann::ordered_json> by_name;
  for (auto& c : conversations) by_name[c["name"]] = c;
  std::map<std::string, ChatTemplate> templates;
  int checked = 0, errors = 0;
  for (const auto& e : expected) {
    std::string name = e["template"];
    if (!templates.count(name)) templates.emplace(name, ChatTemplate::parse(read_file(kDir + name + ".jinja"), name));
    const auto& conv = by_name.at(e["conversation"]);
    nlohmann::ordered_json vars = {{"messages", conv["messages"]},
                           {"tools", conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json()},
                           {"add_generation_prompt", e["add_generation_prompt"]},
                           {"bos_token", "<s>"},
                           {"eos_token", "</s>"}};
    std::string where = name + " / " + std::string(e["conversation"]) + (e["add_generation_prompt"] ? " +gen" : "");
    if (e.contains("error")) {
      try {
        templates.at(name).render(template_value_from_json(vars), testing::chat_template_test_clock);
        ADD_FAILURE() << where << ": expected error " << e["error"];
      } catch (const TemplateError& err) {
        EXPECT_EQ(std::string(err.what()), std::string(e["error"])) << where;
      }
      ++errors;
    } else {
      EXPECT_EQ(templates.at(name).render(template_value_from_json(vars), testing::chat_template_test_clock),
                std::string(e["output"])) << where;
    }
    ++checked;
  }
  EXPECT_GE(checked, 80);
  EXPECT_GT(errors, 0);
}

TEST(ChatTemplate, WhitespaceControl) {
  nlohmann::ordered_json v = {{"xs", {1, 2}}};
  EXPECT_EQ(render("a  {{- 'b' -}}  c", v), "abc");
  EXPECT_EQ(render("{% for x in xs %}\n  {{ x }}\n{% endfor %}\n", v), "  1\n  2\n");  // trim + lstrip blocks
  EXPECT_EQ(render("x {%+ if true %}y{% endif %}", v), "x y");
  EXPECT_EQ(render("  {% if true %}y{% endif %}", v), "y");
  EXPECT_EQ(render("a {# comment #}b", v), "a b");
  EXPECT_EQ(render("line\n  {#- c -#}  \nend", v), "lineend");
}

TEST(ChatTemplate, ScopingAndNamespace) {
  nlohmann::ordered_json v = {{"xs", {1, 2, 3}}};
  // `set` in a loop body does not leak out; namespace attributes do.
  EXPECT_EQ(render("{% set t = 0 %}{% for x in xs %}{% set t = t + x %}{% endfor %}{{ t }}", v), "0");
  EXPECT_EQ(render("{% set ns = namespace(t=0) %}{% for x in xs %}{% set ns.t = ns.t + x %}{% endfor %}{{ ns.t }}", v), "6");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a + b }}{% endmacro %}{{ m(1) }}{{ m(1, b=5) }}", v), "36");
}

TEST(ChatTemplate, RaiseExceptionCarriesTheMessage) {
  try {
    render("{{ raise_exception('roles must alternate') }}", nlohmann::ordered_json::object());
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_STREQ(e.what(), "roles must alternate");
  }
  EXPECT_THROW(render("{{ 'a' + 1 }}", nlohmann::ordered_json::object()), TemplateError);
  EXPECT_THROW(render("{{ undefined_thing + 'x' }}", nlohmann::ordered_json::object()), TemplateError);
}

// Unsupported features fail when the template is loaded, naming the line.
TEST(ChatTemplate, UnsupportedFeaturesFailAtParse) {
  auto parse_error = [](const std::string& src) -> std::string {
    try {
      ChatTemplate::parse(src, "tokenizer_config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(parse_error("ok\n{{ x | wordcount }}"), "tokenizer_config.json: line 2: unsupported filter 'wordcount'");
  EXPECT_EQ(parse_error("{% extends 'base' %}"), "tokenizer_config.json: line 1: unsupported statement '{% extends %}'");
  EXPECT_EQ(parse_error("{% if x %}"), "tokenizer_config.json: line 1: unexpected end of template: expected {% elif %} or {% else %} or {% endif %}");
  EXPECT_EQ(parse_error("{{ x is frobbed }}"), "tokenizer_config.json: line 1: unsupported test 'frobbed'");
  EXPECT_EQ(parse_error("{{ 'abc }}"), "tokenizer_config.json: line 1: unterminated string literal");
  EXPECT_EQ(parse_error("{% for x in y recursive %}{% endfor %}"), "tokenizer_config.json: line 1: recursive for loops are not supported");
  EXPECT_EQ(parse_error("{% endfor %}"), "tokenizer_config.json: line 1: unexpected '{% endfor %}'");
  EXPECT_EQ(parse_error("{{ a b }}"), "tokenizer_config.json: line 1: unexpected 'b'");
  EXPECT_EQ(parse_error("{{ }}"), "tokenizer_config.json: line 1: empty expression {{ }}");
  EXPECT_EQ(parse_error("{{ x "), "tokenizer_config.json: line 1: unterminated tag: missing '}}'");
}

TEST(ChatTemplate, RuntimeGuards) {
  EXPECT_THROW(render("{% for i in range(10000000) %}{% endfor %}", nlohmann::ordered_json::object()), TemplateError);
  EXPECT_THROW(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", nlohmann::ordered_json::object()), TemplateError);
  EXPECT_THROW(render("{{ 1 // 0 }}", nlohmann::ordered_json::object()), TemplateError);
  EXPECT_THROW(render("{{ messages.nope() }}", nlohmann::ordered_json{{"messages", {1}}}), TemplateError);
}

// OpenAI clients send tool-call arguments as a JSON string; the formatter hands
// templates an object, so the rendering equals Jinja2's on the object form.
TEST(ChatFormatter, ToolCallArgumentsReachTemplatesAsObjects) {
  auto conversations = nlohmann::ordered_json::parse(read_file(kDir + "conversations.json"));
  auto expected = nlohmann::ordered_json::parse(read_file(kDir + "expected.json"));
  nlohmann::ordered_json conv;
  for (auto& c : conversations)
    if (c["name"] == "tool_round_trip") conv = c;
  ASSERT_FALSE(conv.is_null());
  nlohmann::ordered_json openai_messages = conv["messages"];
  int converted = 0;
  for (auto& m : openai_messages)
    if (m.contains("tool_calls"))
      for (auto& call : m["tool_calls"]) {
        call["function"]["arguments"] = call["function"]["arguments"].dump();
        ++converted;
      }
  ASSERT_EQ(converted, 2);
  for (const char* name : {"qwen25_tools", "mistral_tools"}) {
    ChatFormatter f = ChatFormatter::from_template(read_file(kDir + name + std::string(".jinja")), name, "<s>", "</s>");
    std::string want;
    for (const auto& e : expected)
      if (e["template"] == name && e["conversation"] == "tool_round_trip" && e["add_generation_prompt"] == true)
        want = e["output"];
    ASSERT_FALSE(want.empty()) << name;
    EXPECT_EQ(f.apply(openai_messages, conv["tools"], true), want) << name;
  }
  // Arguments that are not a JSON object stay a string.
  nlohmann::ordered_json odd = {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "not json"}}}}}}}};
  EXPECT_EQ(template_messages(odd)[0]["tool_calls"][0]["function"]["arguments"], "not json");
}

}  // namespace
}  // namespace distllm::serve
