#include "distllm/train/run_identity.h"

#include <cstdlib>
#include <random>

#include "distllm/base/strings.h"

namespace distllm {

namespace {

using nlohmann::json;

// The identity fields in the order they are compared (and the first difference named).
constexpr const char* kIdentityFields[] = {
    "training data", "--seed",  "--init-from", "--lr",       "--min-lr",       "--warmup", "--schedule",
    "--steps",       "--beta1", "--beta2",     "--adam-eps", "--weight-decay", "--clip",
};

// A recorded number as a person writes it (the flags record 17 digits: 0.0006, not
// 0.00059999999999999995); anything else as recorded.
std::string shown(const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size()) return "'" + v + "'";
  if (v.find_first_of(".eE") == std::string::npos) return v;  // an integer
  for (int digits = 1; digits <= 17; ++digits) {
    std::string s = strprintf("%.*g", digits, d);
    if (std::strtod(s.c_str(), nullptr) == d) return s;
  }
  return v;
}

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

std::string run_identity_difference(const json& saved, const json& current) {
  if (!saved.is_object() || !current.is_object()) return "";
  auto is_cosine = [](const json& t) { return t.contains("--schedule") && text_of(t["--schedule"]) == "cosine"; };
  for (const char* field : kIdentityFields) {
    if (!saved.contains(field) || !current.contains(field)) continue;
    const bool steps = std::string(field) == "--steps";
    if (steps && !is_cosine(saved) && !is_cosine(current)) continue;  // extending a constant schedule is one run
    const std::string a = text_of(saved[field]), b = text_of(current[field]);
    if (a == b) continue;
    return strprintf("%s%s is %s in the checkpoint but %s here", field,
                     steps ? " (the length of the cosine schedule)" : "", shown(a).c_str(), shown(b).c_str());
  }
  return "";
}

std::string new_run_id() {
  std::random_device device;
  std::mt19937_64 mix((static_cast<uint64_t>(device()) << 32) ^ device());
  return strprintf("%016llx", static_cast<unsigned long long>(mix()));
}

}  // namespace distllm
