// regex_to_grammar against std::regex (ECMAScript) on random strings and on strings
// sampled from the grammar itself.
#include <gtest/gtest.h>

#include <regex>

#include "serve_structured/test_util.h"

namespace distllm::structured {
namespace {

using testing_util::compile_bytes;
using testing_util::random_walk;

bool ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

TEST(Regex, AgreesWithStdRegex) {
  const char* patterns[] = {"abc", "a|b|cd", "(ab)*c", "a+b?c{2,3}", "[a-c]+x", "[^ab]*", "\\d{3}-\\d{2}",
                            "\\w+@\\w+\\.com", "(a|b)*abb", "x{2,}", "(?:ab|a)(?:bc|c)", "[\\d.]+", "\\s?a\\s?",
                            "^(a|b)+$", "[-a]b", "a.c", "(0|1)(0|1)?", "[a-z]{0,3}", "colou?r", "\\.+",
                            "[A-Fa-f0-9]{2}(:[A-Fa-f0-9]{2}){2}", "(a|)b", "\\D\\W\\S", "[^\\d\\s]+", "a{0}b",
                            "a*?b+?", "[\\]x]+", "\\x41\\u0042", "(((a)))|b{1,2}c"};
  const std::string alphabet = "abcdrxABC01-_.:@ \t\n]";
  std::mt19937 rng(1234);
  for (const char* p : patterns) {
    SCOPED_TRACE(p);
    std::regex ref(p, std::regex::ECMAScript);
    auto compiled = compile_bytes(regex_to_grammar(p));
    auto check = [&](const std::string& s) {
      GrammarMatcher m(compiled);
      bool ours = m.accept_bytes(s) && m.can_terminate();
      EXPECT_EQ(ours, std::regex_match(s, ref)) << "string '" << s << "'";
    };
    for (int i = 0; i < 400; ++i) {
      std::string s;
      int len = std::uniform_int_distribution<int>(0, 8)(rng);
      for (int k = 0; k < len; ++k) s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      check(s);
    }
    int sampled = 0;
    for (int i = 0; i < 300; ++i) {
      GrammarMatcher m(compiled);
      std::string s;
      if (!random_walk(m, rng, s, 0.3, 60)) continue;
      if (!ascii(s)) continue;  // std::regex works on bytes, ours on characters
      ++sampled;
      EXPECT_TRUE(std::regex_match(s, ref)) << "sampled '" << s << "'";
    }
    EXPECT_GT(sampled, 0);
  }
}

TEST(Regex, JsonStringModeEscapes) {
  RegexExpr r = regex_to_expr("a\"\\\\\\n[\\x00-\\x01]", {true});
  GrammarBuilder b;
  b.define("root", r.expr);
  auto g = compile_bytes(b.build("root"));
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("a\\\"\\\\\\n\\u0001") && m.can_terminate());
  GrammarMatcher raw(g);
  EXPECT_FALSE(raw.accept_bytes("a\""));
}

TEST(Regex, NamedGroupsAreGroups) {
  auto g = compile_bytes(regex_to_grammar("(?<year>\\d{2})-(?P<m>a|b)"));
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("12-b") && m.can_terminate());
}

std::string error_of(const std::string& p) {
  try {
    regex_to_grammar(p);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(Regex, RefusesUnsupportedConstructsByName) {
  EXPECT_EQ(error_of("(a)\\1"), "regex error at offset 3: backreference '\\1' is not supported");
  EXPECT_EQ(error_of("a(?=b)"), "regex error at offset 1: lookahead '(?=' is not supported");
  EXPECT_EQ(error_of("a(?!b)"), "regex error at offset 1: negative lookahead '(?!' is not supported");
  EXPECT_EQ(error_of("(?<=a)b"), "regex error at offset 0: lookbehind '(?<=' is not supported");
  EXPECT_EQ(error_of("(?<!a)b"), "regex error at offset 0: negative lookbehind '(?<!' is not supported");
  EXPECT_EQ(error_of("\\bword"), "regex error at offset 0: word boundary '\\b' is not supported");
  EXPECT_EQ(error_of("a^b"), "regex error at offset 1: anchor '^' is only supported at the start of the pattern");
  EXPECT_EQ(error_of("a$b"), "regex error at offset 1: anchor '$' is only supported at the end of the pattern");
  EXPECT_EQ(error_of("(ab"), "regex error at offset 0: unclosed '('");
  EXPECT_EQ(error_of("ab)"), "regex error at offset 2: unmatched ')'");
  EXPECT_EQ(error_of("*a"), "regex error at offset 0: quantifier has nothing to repeat");
  EXPECT_EQ(error_of("[abc"), "regex error at offset 0: unterminated character class");
  EXPECT_EQ(error_of("\\p{L}"), "regex error at offset 0: Unicode property escape '\\p' is not supported");
  EXPECT_NE(error_of("(a*)*").find("left-recursive"), std::string::npos);
}

}  // namespace
}  // namespace distllm::structured
