#include "distllm/base/profiler.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "distllm/base/timer.h"

namespace distllm {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::map<std::string, ProfileEntry>& table() {
  static std::map<std::string, ProfileEntry> t;
  return t;
}

}  // namespace

bool Profiler::enabled() { return g_enabled.load(std::memory_order_relaxed); }
void Profiler::set_enabled(bool on) { g_enabled.store(on); }

void Profiler::reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  table().clear();
}

void Profiler::add(const char* name, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  ProfileEntry& e = table()[name];
  e.name = name;
  e.seconds += seconds;
  e.calls += 1;
}

std::vector<ProfileEntry> Profiler::snapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<ProfileEntry> out;
  for (const auto& [k, v] : table()) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.seconds > b.seconds; });
  return out;
}

ProfileScope::ProfileScope(const char* name) : name_(name) {
  if (Profiler::enabled()) start_ = now_seconds();
}

ProfileScope::~ProfileScope() {
  if (start_ != 0) Profiler::add(name_, now_seconds() - start_);
}

}  // namespace distllm
