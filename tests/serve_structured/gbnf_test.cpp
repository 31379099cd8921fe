#include <gtest/gtest.h>

#include "serve_structured/test_util.h"

namespace distllm::structured {
namespace {

using testing_util::matches;

TEST(Gbnf, LiteralsClassesGroupsAndRepetition) {
  Grammar g = parse_gbnf(R"(
# a comment
root ::= "{" ws pair ("," ws pair)* "}"   # trailing comment
pair ::= [a-z]+ ":" ws ( "true" | "false" | [0-9]{1,3} )
ws   ::= [ \t\n]?
)");
  EXPECT_TRUE(matches(g, "{a:true}"));
  EXPECT_TRUE(matches(g, "{ab: 123, c:false}"));
  EXPECT_FALSE(matches(g, "{ab: 1234}"));
  EXPECT_FALSE(matches(g, "{}"));
  EXPECT_FALSE(matches(g, "{A:true}"));
  EXPECT_FALSE(matches(g, "{a:true"));
}

TEST(Gbnf, NegatedClassesAndUnicode) {
  Grammar g = parse_gbnf("root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\n");
  EXPECT_TRUE(matches(g, "\"hello\""));
  EXPECT_TRUE(matches(g, "\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\""));
  EXPECT_FALSE(matches(g, "\"a\"b\""));
  EXPECT_FALSE(matches(g, "\"a\\\""));
  // Invalid UTF-8 is not a character.
  EXPECT_FALSE(matches(g, "\"\xC3\""));
  EXPECT_FALSE(matches(g, "\"\xED\xA0\x80\""));  // a surrogate
  Grammar r = parse_gbnf("root ::= [α-γ]{2} .\n");
  EXPECT_TRUE(matches(r, "αγx"));
  EXPECT_TRUE(matches(r, "ββ\xE2\x82\xAC"));
  EXPECT_FALSE(matches(r, "αδx"));
  EXPECT_FALSE(matches(r, "αβ\n"));
}

TEST(Gbnf, RepetitionCounts) {
  Grammar g = parse_gbnf("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,}\n");
  EXPECT_TRUE(matches(g, "aabbbc"));
  EXPECT_TRUE(matches(g, "aaaabbbccc"));
  EXPECT_FALSE(matches(g, "abbbc"));
  EXPECT_FALSE(matches(g, "aaaaabbbc"));
  EXPECT_FALSE(matches(g, "aabbc"));
  EXPECT_FALSE(matches(g, "aabbb"));
}

TEST(Gbnf, MultiLineRulesInsideGroups) {
  Grammar g = parse_gbnf("root ::=\n  \"x\" (\n    \"a\" |\n    \"b\"\n  )\nother ::= \"z\"\n");
  EXPECT_TRUE(matches(g, "xa"));
  EXPECT_TRUE(matches(g, "xb"));
}

std::string error_of(const std::string& text) {
  try {
    parse_gbnf(text);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, ErrorsNameLineColumnAndProblem) {
  EXPECT_EQ(error_of("root ::= \"abc\n"), "grammar error at line 1, column 10: unterminated literal");
  EXPECT_EQ(error_of("root ::= a\n"), "rule 'root' refers to undefined rule 'a'");
  EXPECT_EQ(error_of("foo ::= \"a\"\n"), "grammar has no 'root' rule");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\"\n"), "grammar error at line 2, column 1: rule 'root' is defined more than once");
  EXPECT_EQ(error_of("root = \"a\"\n"), "grammar error at line 1, column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error_of("root ::= ( \"a\"\n"), "grammar error at line 1, column 10: unclosed '('");
  EXPECT_EQ(error_of("root ::= [a-z"), "grammar error at line 1, column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= * \"a\"\n"), "grammar error at line 1, column 10: '*' has nothing to repeat");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}\n"), "grammar error at line 1, column 13: repetition maximum is below its minimum");
  EXPECT_EQ(error_of("root ::= \"\\q\"\n"), "grammar error at line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= \"a\" )\n"), "grammar error at line 1, column 14: unexpected character ')'");
  EXPECT_NE(error_of("root ::= root \"a\"\n").find("rule 'root' is left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= x \"a\"\nx ::= \"\" | root\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"?)*\n").find("left-recursive"), std::string::npos);
  EXPECT_EQ(error_of("root ::= [^\\x00-\\U0010FFFF]\n"), "grammar matches nothing: rule 'root' can never complete");
  EXPECT_NE(error_of("root ::= \"a\"{99999}\n").find("limit"), std::string::npos);
}

}  // namespace
}  // namespace distllm::structured
