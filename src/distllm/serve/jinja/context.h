// Rendering state: variable scopes, loop control flow, and the limits that keep a
// hostile template from running forever or filling memory.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "distllm/serve/jinja/ast.h"
#include "distllm/serve/jinja/chat_template.h"

namespace distllm::serve::jinja {

constexpr size_t kMaxOutput = 64u << 20;
constexpr int64_t kMaxRange = 100000;
constexpr int kMaxMacroDepth = 64;
constexpr int64_t kMaxSteps = 5'000'000;  // statements and loop iterations per render

struct Ctx {
  std::vector<std::unordered_map<std::string, V>> scopes;
  enum class Flow { kNormal, kBreak, kContinue } flow = Flow::kNormal;
  int macro_depth = 0;
  int64_t steps = 0;
  const TemplateClock* clock = nullptr;  // strftime_now's; null: the local time

  void step(int line) {
    if (++steps > kMaxSteps) fail_at_line(line);
  }
  [[noreturn]] static void fail_at_line(int line);

  V lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return {};
  }
  void set(const std::string& name, V v) { scopes.back()[name] = std::move(v); }
};

// Throws TemplateError naming the template line.
[[noreturn]] void fail_at(int line, const std::string& msg);

void render_body(const Body& body, Ctx& ctx, std::string& out);
V eval(const Expr& e, Ctx& ctx);

}  // namespace distllm::serve::jinja
