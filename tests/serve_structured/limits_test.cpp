// A hostile grammar spec costs a fast refusal, never the server's time, stack or
// memory: compilation is linear in the spec, refuses what the matcher could not
// follow, and gives back what it allocated; the compiler's cache is bounded by
// bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/serve/structured/ordered_json.h"
#include "distllm/serve/structured/structured.h"

namespace distllm::structured {
namespace {

std::vector<std::string> byte_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.push_back("");  // EOS
  return tokens;
}

// "p" + std::to_string(i) trips a false -Wrestrict in GCC 12.
std::string numbered(const char* prefix, long i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string refusal(GrammarCompiler& c, const GrammarSpec& spec) {
  try {
    c.compile(spec);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

// ~1 MB: 30,000 optional properties. Each may be left out, so the first byte of
// the object's body could start any of them: 30,000 parse stacks (and a chain of
// 30,000 nested rules), which the matcher refuses. It used to take 9-16 s (quadratic
// rule bookkeeping and JSON parsing) to get there.
TEST(GrammarLimits, AMegabyteOfOptionalPropertiesIsRefusedFast) {
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  for (int i = 0; i < 30000; ++i) props[numbered("p", 100000 + i)] = {{"type", "string"}};
  const std::string schema = nlohmann::ordered_json{{"type", "object"}, {"properties", props}}.dump();
  ASSERT_GT(schema.size(), 800000u);
  GrammarCompiler c(byte_vocab(), 256);
  auto t0 = std::chrono::steady_clock::now();
  const std::string e = refusal(c, GrammarSpec::json_schema(schema));
  const double took = seconds_since(t0);
  EXPECT_NE(e.find("too"), std::string::npos) << e;
  EXPECT_LT(took, 4.0) << "refusing took " << took << " s";
  // All of them required is one path: it compiles, as fast.
  nlohmann::ordered_json all = {{"type", "object"}, {"properties", props}, {"required", nlohmann::ordered_json::array()}};
  for (auto it = props.begin(); it != props.end(); ++it) all["required"].push_back(it.key());
  t0 = std::chrono::steady_clock::now();
  auto g = c.compile(GrammarSpec::json_schema(all.dump()));
  EXPECT_LT(seconds_since(t0), 4.0);
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("{\"p100000\":"));
}

// An enum of 5,000 values under a property: reaching it would need 5,000 stacks.
// Refused when compiled (a 400), not when a request gets there (a request error).
TEST(GrammarLimits, APositionNoRequestCouldPassIsRefusedWhenCompiled) {
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (int i = 0; i < 5000; ++i) values.push_back(numbered("v", i));
  nlohmann::ordered_json schema = {{"type", "object"},
                                   {"properties", {{"x", {{"enum", values}}}}},
                                   {"required", {"x"}}};
  GrammarCompiler c(byte_vocab(), 256);
  EXPECT_NE(refusal(c, GrammarSpec::json_schema(schema.dump())).find("too ambiguous"), std::string::npos);
  // 1,000 values are fine.
  values.erase(values.begin() + 1000, values.end());
  schema["properties"]["x"]["enum"] = values;
  EXPECT_EQ(refusal(c, GrammarSpec::json_schema(schema.dump())), "");
}

// A chain of 200,000 rules, each only naming the next: matching it used to recurse
// once per rule, past the thread's stack (a crash).
TEST(GrammarLimits, DeepRuleChainsAreRefusedNotAStackOverflow) {
  std::string gbnf = "root ::= r0\n";
  for (int i = 0; i < 200000; ++i) gbnf += numbered("r", i) + numbered(" ::= r", i + 1) + "\n";
  gbnf += "r200000 ::= \"x\"\n";
  GrammarCompiler c(byte_vocab(), 256);
  EXPECT_NE(refusal(c, GrammarSpec::gbnf(gbnf)).find("too deeply nested"), std::string::npos);
}

// Mask-cache entries and whole grammars both count: the compiler keeps at most
// its byte budget (plus the newest grammar), dropping the least recently used.
TEST(GrammarLimits, TheCompiledGrammarCacheIsBoundedByBytes) {
  const size_t budget = size_t{48} << 20;
  GrammarCompiler c(byte_vocab(), 256, 64, budget);
  size_t largest = 0;
  for (int i = 0; i < 12; ++i) {
    // ~200,000 elements (~8 MB) each, all different.
    auto g = c.compile(GrammarSpec::regex(numbered("(a|b){200}(c{1000}){200}", i)));
    largest = std::max(largest, g->memory_bytes());
    EXPECT_LE(c.cache_bytes(), budget + g->memory_bytes()) << i;
  }
  EXPECT_GT(largest, size_t{4} << 20);
  EXPECT_LT(c.cache_size(), 12u);
  EXPECT_LE(c.cache_bytes(), budget + largest);
  // A hit that makes the newest entry the most recent does not grow the cache.
  c.compile(GrammarSpec::regex("(a|b){200}(c{1000}){200}11"));
  EXPECT_LE(c.cache_bytes(), budget + largest);
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long value = -1;
  while (f >> key) {
    if (key == "VmRSS:") {
      f >> value;
      break;
    }
    f.ignore(1 << 16, '\n');
  }
  return value;
}

// Each refused grammar here (a 60,000-way alternation, ~600 KB of regex) allocates
// tens of MB in small pieces before it is refused. On long-lived threads (an HTTP
// server's pool) that memory used to stay with each thread's allocator arena:
// 8 threads x 3 refusals left ~580 MB resident for nothing.
TEST(GrammarLimits, RefusedCompilationsGiveTheirMemoryBack) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's quarantine holds freed memory: RSS grows by design";
#endif
  GrammarCompiler c(byte_vocab(), 256);
  const long start = rss_kib();
  std::atomic<int> done{0};
  std::atomic<bool> quit{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 3; ++k) {
        std::string re = "(";
        for (int i = 0; i < 60000; ++i) re += numbered(i ? "|w" : "w", i * 31 + t * 7 + k);
        re += ")";
        const std::string e = refusal(c, GrammarSpec::regex(re));
        EXPECT_NE(e.find("too ambiguous"), std::string::npos) << e;
      }
      ++done;
      while (!quit) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // stay alive, arena and all
    });
  }
  while (done < 8) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const long after = rss_kib();
  quit = true;
  for (auto& th : threads) th.join();
  std::printf("[limits] RSS %ld KiB before, %ld KiB after 24 refusals on 8 live threads\n", start, after);
  EXPECT_LT(after - start, 64 * 1024) << "resident after refusals: " << after << " KiB";
  EXPECT_EQ(c.cache_size(), 0u);
  EXPECT_EQ(c.cache_bytes(), 0u);
}

// Request bodies and schemas are parsed into ordered_json (document order matters);
// nlohmann's own parser looks every key up in a vector.
TEST(OrderedJson, ParsesLikeNlohmannInLinearTime) {
  const std::string small = R"({"b": [1, 2.5, "x", null, true, {"c": {}}], "a": -3, "b2": 18446744073709551615, "a": 4})";
  EXPECT_EQ(parse_ordered_json(small), nlohmann::ordered_json::parse(small));
  EXPECT_EQ(parse_ordered_json(small).dump(), nlohmann::ordered_json::parse(small).dump());
  for (const char* bad : {"{\"a\": }", "[1, 2", "1e999", "{} x", ""}) {
    std::string ours, theirs;
    try {
      parse_ordered_json(bad);
    } catch (const nlohmann::ordered_json::exception& e) {
      ours = e.what();
    }
    try {
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(bad);
      (void)j;
    } catch (const nlohmann::ordered_json::exception& e) {
      theirs = e.what();
    }
    EXPECT_FALSE(ours.empty()) << bad;
    EXPECT_EQ(ours, theirs) << bad;
  }
  std::string big = "{";
  for (int i = 0; i < 200000; ++i) big += numbered(i ? ",\"k" : "\"k", i) + numbered("\":", i);
  big += "}";
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::ordered_json j = parse_ordered_json(big);
  EXPECT_LT(seconds_since(t0), 2.0);
  ASSERT_EQ(j.size(), 200000u);
  EXPECT_EQ(j.begin().key(), "k0");
  EXPECT_EQ(j["k199999"], 199999);
}

}  // namespace
}  // namespace distllm::structured
