// JSON Schema -> grammar: documents sampled from the grammar must validate, against
// an independent checker here and against ajv (Node), and unsupported keywords are
// refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "reference_policy.h"
#include "serve_structured/schema_checker.h"
#include "serve_structured/test_util.h"

namespace distllm::structured {
namespace {

using testing_util::compile_bytes;
using testing_util::matches;
using testing_util::random_walk;

const std::vector<std::string> kSchemas = {"person", "numbers", "tree", "formats", "choices", "patterns", "definitions"};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string schema_path(const std::string& name) {
  return std::string(DISTLLM_SOURCE_DIR) + "/tests/serve_structured/schemas/" + name + ".json";
}

// `count` documents sampled from the schema's grammar, one random walk each.
std::vector<std::string> sample_documents(const std::string& name, int count, uint32_t seed) {
  auto compiled = compile_bytes(json_schema_to_grammar(std::string_view(read_file(schema_path(name)))));
  std::mt19937 rng(seed);
  std::vector<std::string> docs;
  int attempts = 0;
  while (static_cast<int>(docs.size()) < count && attempts++ < count * 2) {
    GrammarMatcher m(compiled);
    std::string s;
    if (random_walk(m, rng, s, 0.5, 20000)) docs.push_back(s);
  }
  return docs;
}

TEST(JsonSchema, SampledDocumentsValidateWithIndependentChecker) {
  for (const auto& name : kSchemas) {
    SCOPED_TRACE(name);
    testing_util::SchemaChecker checker(nlohmann::json::parse(read_file(schema_path(name))));
    auto docs = sample_documents(name, 300, 7);
    ASSERT_EQ(docs.size(), 300u);
    for (const auto& d : docs) {
      nlohmann::json v;
      ASSERT_NO_THROW(v = nlohmann::json::parse(d)) << d;
      EXPECT_EQ(checker.check(v), "") << d;
    }
  }
}

TEST(JsonSchema, AjvValidatesSampledDocuments) {
  std::string ajv = std::string(DISTLLM_SOURCE_DIR) + "/node_modules/ajv/package.json";
  std::string formats = std::string(DISTLLM_SOURCE_DIR) + "/node_modules/ajv-formats/package.json";
  DISTLLM_REQUIRE_REFERENCE(std::system("node --version >/dev/null 2>&1") == 0, "node");
  DISTLLM_REQUIRE_REFERENCE(std::filesystem::exists(ajv) && std::filesystem::exists(formats),
                            "npm packages ajv and ajv-formats (npm ci)");
  std::string dir = std::string(DISTLLM_BINARY_DIR) + "/serve_structured_docs";
  std::filesystem::create_directories(dir);
  for (const auto& name : kSchemas) {
    SCOPED_TRACE(name);
    auto docs = sample_documents(name, 2000, 99);
    ASSERT_EQ(docs.size(), 2000u);
    std::string out = dir + "/" + name + ".jsonl";
    {
      std::ofstream f(out);
      for (auto& d : docs) f << d << "\n";
    }
    std::string cmd = "cd '" + std::string(DISTLLM_SOURCE_DIR) + "' && node tests/serve_structured/ajv_check.mjs '" +
                      schema_path(name) + "' '" + out + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

TEST(JsonSchema, PropertyOrderAndBoundedWhitespace) {
  Grammar g = json_schema_to_grammar(std::string_view(
      R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"integer"}},"required":["b","a"]})"));
  EXPECT_TRUE(matches(g, R"({"b":1,"a":2})"));
  EXPECT_TRUE(matches(g, R"({"b": 1, "a": 2})"));
  EXPECT_FALSE(matches(g, R"({"a":2,"b":1})"));
  EXPECT_FALSE(matches(g, R"({"b":  1,"a":2})"));
  EXPECT_FALSE(matches(g, R"({ "b":1,"a":2})"));
  EXPECT_FALSE(matches(g, R"({"b":1,"a":2,"c":3})"));
  EXPECT_FALSE(matches(g, R"({"b":01,"a":2})"));
}

TEST(JsonSchema, OptionalPropertiesAndCommas) {
  Grammar g = json_schema_to_grammar(std::string_view(
      R"({"properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}},"required":["b"]})"));
  EXPECT_TRUE(matches(g, R"({"b":null})"));
  EXPECT_TRUE(matches(g, R"({"a":null,"b":null})"));
  EXPECT_TRUE(matches(g, R"({"b":null,"c":null})"));
  EXPECT_TRUE(matches(g, R"({"a":null,"b":null,"c":null})"));
  EXPECT_FALSE(matches(g, R"({})"));
  EXPECT_FALSE(matches(g, R"({,"b":null})"));
  EXPECT_FALSE(matches(g, R"({"b":null,})"));
  Grammar all_optional = json_schema_to_grammar(std::string_view(R"({"properties":{"a":{"type":"null"},"b":{"type":"null"}}})"));
  EXPECT_TRUE(matches(all_optional, "{}"));
  EXPECT_TRUE(matches(all_optional, R"({"b":null})"));
  EXPECT_FALSE(matches(all_optional, R"({"b":null,"a":null})"));
}

TEST(JsonSchema, IntegerRangesAreExact) {
  const std::pair<int64_t, int64_t> ranges[] = {{-123, 4567}, {0, 0}, {7, 7}, {-50, -3}, {95, 105}, {0, 1000}, {-1, 1}, {10, 19}};
  for (auto [lo, hi] : ranges) {
    SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi));
    auto g = compile_bytes(json_schema_to_grammar(
        std::string_view("{\"type\":\"integer\",\"minimum\":" + std::to_string(lo) + ",\"maximum\":" + std::to_string(hi) + "}")));
    for (int64_t x = lo - 300; x <= hi + 300; ++x) {
      GrammarMatcher m(g);
      bool ok = m.accept_bytes(std::to_string(x)) && m.can_terminate();
      EXPECT_EQ(ok, x >= lo && x <= hi) << x;
    }
    GrammarMatcher lead(g);
    EXPECT_FALSE(lead.accept_bytes("0" + std::to_string(std::max<int64_t>(lo, 1))) && lead.can_terminate());
  }
  Grammar nonneg = json_schema_to_grammar(std::string_view(R"({"type":"number","minimum":0})"));
  EXPECT_TRUE(matches(nonneg, "0.5"));
  EXPECT_TRUE(matches(nonneg, "123"));
  EXPECT_FALSE(matches(nonneg, "-1"));
  EXPECT_FALSE(matches(nonneg, "-0.5"));
}

TEST(JsonSchema, JsonObjectModeAndChoices) {
  Grammar obj = json_object_grammar();
  EXPECT_TRUE(matches(obj, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(matches(obj, "{}"));
  EXPECT_FALSE(matches(obj, "[]"));
  EXPECT_FALSE(matches(obj, "\"x\""));
  Grammar choice = choice_grammar({"yes", "no", "maybe so"});
  EXPECT_TRUE(matches(choice, "maybe so"));
  EXPECT_FALSE(matches(choice, "maybe"));
  EXPECT_THROW(choice_grammar({}), GrammarError);
}

std::string error_of(const std::string& schema) {
  try {
    json_schema_to_grammar(std::string_view(schema));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  EXPECT_EQ(error_of(R"({"type":"object","patternProperties":{"a":{}}})"),
            "JSON Schema: unsupported JSON Schema keyword 'patternProperties'");
  EXPECT_EQ(error_of(R"({"allOf":[{"type":"string"}]})"), "JSON Schema: unsupported JSON Schema keyword 'allOf'");
  EXPECT_EQ(error_of(R"({"type":"integer","multipleOf":3})"), "JSON Schema: unsupported JSON Schema keyword 'multipleOf'");
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"a":{"type":"string","if":{}}}})"),
            "JSON Schema: unsupported JSON Schema keyword 'if'");
  EXPECT_EQ(error_of(R"({"type":"array","uniqueItems":true})"),
            "JSON Schema: unsupported JSON Schema keyword 'uniqueItems' (only false)");
  EXPECT_EQ(error_of(R"({"type":"string","format":"hostname"})"), "JSON Schema: unsupported JSON Schema format 'hostname'");
  EXPECT_EQ(error_of(R"({"type":"strin"})"), "JSON Schema: unknown type 'strin'");
  EXPECT_EQ(error_of(R"({"$ref":"#/$defs/missing"})"),
            "JSON Schema: unsupported or unresolvable '$ref' \"#/$defs/missing\" (only #, #/$defs/NAME and #/definitions/NAME)");
  EXPECT_EQ(error_of(R"j({"type":"string","pattern":"(?=a)"})j"),
            "JSON Schema: 'pattern': regex error at offset 0: lookahead '(?=' is not supported");
  EXPECT_EQ(error_of(R"({"type":"integer","minimum":5,"maximum":4})"),
            "JSON Schema: no integer lies between the minimum and the maximum");
  EXPECT_EQ(error_of("{\"type\":"), error_of("{\"type\":"));
  EXPECT_EQ(error_of("{\"type\":").rfind("JSON Schema is not valid JSON", 0), 0u);
  EXPECT_EQ(error_of("false"), "JSON Schema: schema 'false' matches nothing");
}

TEST(JsonSchema, RecursiveRootRef) {
  Grammar g = json_schema_to_grammar(std::string_view(
      R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})"));
  EXPECT_TRUE(matches(g, R"({"next":{"next":{"next":null}}})"));
  EXPECT_FALSE(matches(g, R"({"next":{}})"));
}

}  // namespace
}  // namespace distllm::structured
