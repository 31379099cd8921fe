// Helpers for the structured-output tests: whole-string matching, random walks
// through a grammar, and small vocabularies.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "distllm/serve/structured/structured.h"

namespace distllm::structured::testing_util {

// A byte-per-token vocabulary (token i = byte i, EOS = 256) so a matcher can run any
// grammar on raw strings.
inline std::shared_ptr<const CompiledGrammar> compile_bytes(Grammar g) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.push_back("");
  return std::make_shared<CompiledGrammar>(std::move(g), std::make_shared<Vocabulary>(std::move(tokens), 256));
}

inline bool matches(const Grammar& g, const std::string& s) {
  GrammarMatcher m(compile_bytes(g));
  return m.accept_bytes(s) && m.can_terminate();
}

// Samples a string by picking uniformly among the allowed next bytes, stopping with
// probability `stop` whenever the grammar may end. Returns false if it ran past
// max_len (the caller retries).
inline bool random_walk(GrammarMatcher& m, std::mt19937& rng, std::string& out, double stop = 0.1,
                        size_t max_len = 4000) {
  out.clear();
  while (out.size() < max_len) {
    ByteSet next = m.next_bytes();
    if (m.can_terminate() && (next.empty() || std::uniform_real_distribution<double>(0, 1)(rng) < stop)) return true;
    std::vector<uint8_t> choices;
    for (int b = 0; b < 256; ++b)
      if (next.test(static_cast<uint8_t>(b))) choices.push_back(static_cast<uint8_t>(b));
    if (choices.empty()) return false;  // cannot happen: every state can complete
    // Sometimes pick among the bytes that close strings and containers, which keeps
    // documents short.
    std::vector<uint8_t> punct;
    for (uint8_t c : choices)
      if (c == '"' || c == ']' || c == '}') punct.push_back(c);
    const auto& pool = !punct.empty() && std::uniform_real_distribution<double>(0, 1)(rng) < 0.3 ? punct : choices;
    uint8_t b = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    std::string one(1, static_cast<char>(b));
    if (!m.accept_bytes(one)) return false;
    out += one;
  }
  return false;
}

}  // namespace distllm::structured::testing_util
