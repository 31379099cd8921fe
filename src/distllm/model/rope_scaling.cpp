#include "distllm/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/kernels/rope.h"
#include "distllm/model/config.h"

namespace distllm {

namespace {

using Kind = RopeScaling::Kind;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "none";
    case Kind::kLinear: return "linear";
    case Kind::kDynamic: return "dynamic";
    case Kind::kLlama3: return "llama3";
    case Kind::kYarn: return "yarn";
    case Kind::kLongRope: return "longrope";
  }
  return "?";
}

double number(const nlohmann::json& j, const char* key, double fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DL_CHECK(it->is_number(), "%s: rope_scaling.%s must be a number", where.c_str(), key);
  return it->get<double>();
}

std::vector<double> numbers(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  DL_CHECK(it != j.end() && it->is_array(), "%s: rope_scaling.%s must be a list of numbers", where.c_str(), key);
  std::vector<double> out;
  for (const auto& v : *it) {
    DL_CHECK(v.is_number(), "%s: rope_scaling.%s must be a list of numbers", where.c_str(), key);
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace

std::string RopeScaling::describe() const {
  if (!active()) return "";
  return strprintf("%s x%g", kind_name(kind), factor);
}

bool RopeScaling::operator==(const RopeScaling& o) const {
  return kind == o.kind && factor == o.factor && original_max_position == o.original_max_position &&
         low_freq_factor == o.low_freq_factor && high_freq_factor == o.high_freq_factor && beta_fast == o.beta_fast &&
         beta_slow == o.beta_slow && attention_factor == o.attention_factor && short_factor == o.short_factor &&
         long_factor == o.long_factor;
}

RopeScaling parse_rope_scaling(const nlohmann::json& config, int max_position, const std::string& origin) {
  RopeScaling s;
  auto it = config.find("rope_scaling");
  if (it == config.end() || it->is_null()) return s;
  const nlohmann::json& r = *it;
  DL_CHECK(r.is_object(), "%s: rope_scaling must be an object", origin.c_str());
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (auto t = r.find(key); t != r.end() && t->is_string()) type = t->get<std::string>();
  DL_CHECK(!type.empty(), "%s: rope_scaling needs a \"rope_type\"", origin.c_str());
  // The keys each type reads; any other is a feature this code would silently skip.
  std::set<std::string> known = {"rope_type", "type", "factor"};
  if (type == "default") return s;
  if (type == "linear") {
    s.kind = Kind::kLinear;
  } else if (type == "dynamic") {
    s.kind = Kind::kDynamic;
  } else if (type == "llama3") {
    s.kind = Kind::kLlama3;
    s.low_freq_factor = number(r, "low_freq_factor", 1.0, origin);
    s.high_freq_factor = number(r, "high_freq_factor", 4.0, origin);
    s.original_max_position = static_cast<int>(number(r, "original_max_position_embeddings", max_position, origin));
    known.insert({"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    DL_CHECK(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0,
             "%s: rope_scaling needs 0 < low_freq_factor < high_freq_factor", origin.c_str());
  } else if (type == "yarn") {
    s.kind = Kind::kYarn;
    s.beta_fast = number(r, "beta_fast", 32.0, origin);
    s.beta_slow = number(r, "beta_slow", 1.0, origin);
    s.attention_factor = number(r, "attention_factor", 0.0, origin);
    s.original_max_position = static_cast<int>(number(r, "original_max_position_embeddings", max_position, origin));
    known.insert({"beta_fast", "beta_slow", "attention_factor", "original_max_position_embeddings"});
    for (const char* unsupported : {"mscale", "mscale_all_dim", "truncate"})
      DL_CHECK(!r.contains(unsupported), "%s: rope_scaling.%s is not supported", origin.c_str(), unsupported);
  } else if (type == "longrope" || type == "su") {
    s.kind = Kind::kLongRope;
    s.short_factor = numbers(r, "short_factor", origin);
    s.long_factor = numbers(r, "long_factor", origin);
    s.attention_factor = number(r, "attention_factor", 0.0, origin);
    // Phi-3 keeps its pre-training context beside the config's (longer) one.
    s.original_max_position = static_cast<int>(number(config, "original_max_position_embeddings", 0, origin));
    known.insert({"short_factor", "long_factor", "attention_factor"});
  } else {
    throw_error(strprintf("%s: rope_scaling type '%s' is not supported (linear, dynamic, llama3, yarn, longrope)",
                          origin.c_str(), type.c_str()));
  }
  for (auto k = r.begin(); k != r.end(); ++k)
    DL_CHECK(known.count(k.key()) != 0, "%s: rope_scaling.%s is not supported for rope_type %s", origin.c_str(),
             k.key().c_str(), type.c_str());
  s.factor = number(r, "factor", s.kind == Kind::kLongRope ? 1.0 : 0.0, origin);
  DL_CHECK(s.factor > 0 && std::isfinite(s.factor), "%s: rope_scaling.factor must be positive", origin.c_str());
  DL_CHECK(s.kind == Kind::kLongRope || s.original_max_position >= 0, "%s: bad original_max_position_embeddings",
           origin.c_str());
  return s;
}

nlohmann::json rope_scaling_json(const RopeScaling& s) {
  if (!s.active()) return nullptr;
  nlohmann::json j = {{"rope_type", kind_name(s.kind)}, {"factor", s.factor}};
  switch (s.kind) {
    case Kind::kLlama3:
      j["low_freq_factor"] = s.low_freq_factor;
      j["high_freq_factor"] = s.high_freq_factor;
      j["original_max_position_embeddings"] = s.original_max_position;
      break;
    case Kind::kYarn:
      j["beta_fast"] = s.beta_fast;
      j["beta_slow"] = s.beta_slow;
      if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
      j["original_max_position_embeddings"] = s.original_max_position;
      break;
    case Kind::kLongRope:
      j["short_factor"] = s.short_factor;
      j["long_factor"] = s.long_factor;
      if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
      break;
    default: break;
  }
  return j;
}

RopeFrequencies rope_frequencies(const RopeScaling& s, int head_dim, double theta, int max_position) {
  RopeFrequencies f;
  const int half = head_dim / 2;
  f.inv_freq = kernels::rope_inverse_frequencies(head_dim, theta);
  switch (s.kind) {
    case Kind::kNone: break;
    case Kind::kLinear:
      for (float& v : f.inv_freq) v = static_cast<float>(v / s.factor);
      break;
    case Kind::kDynamic: {
      // NTK-aware: a larger base, fixed for the whole extended context (vLLM's rule).
      const double original = max_position / s.factor;
      const double base = theta * std::pow(s.factor * max_position / original - (s.factor - 1.0),
                                           static_cast<double>(head_dim) / (head_dim - 2));
      f.inv_freq = kernels::rope_inverse_frequencies(head_dim, base);
      break;
    }
    case Kind::kLlama3: {
      const double old_len = s.original_max_position;
      const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
      for (float& v : f.inv_freq) {
        const float wavelen = static_cast<float>(2.0 * M_PI) / v;
        const float scaled = wavelen > low_wavelen ? static_cast<float>(v / s.factor) : v;
        if (wavelen < high_wavelen || wavelen > low_wavelen) {
          v = scaled;
          continue;
        }
        const float smooth =
            static_cast<float>((old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor));
        v = (1.0f - smooth) * static_cast<float>(scaled / s.factor) + smooth * scaled;
      }
      break;
    }
    case Kind::kYarn: {
      auto correction_dim = [&](double rotations) {
        return head_dim * std::log(s.original_max_position / (rotations * 2 * M_PI)) / (2 * std::log(theta));
      };
      const double low = std::max(std::floor(correction_dim(s.beta_fast)), 0.0);
      double high = std::min(std::ceil(correction_dim(s.beta_slow)), static_cast<double>(head_dim - 1));
      if (low == high) high += 0.001;
      for (int i = 0; i < half; ++i) {
        const float extrapolation = f.inv_freq[static_cast<size_t>(i)];
        const float interpolation = static_cast<float>(extrapolation / s.factor);
        const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
        const float extra_weight = 1.0f - ramp;
        f.inv_freq[static_cast<size_t>(i)] = interpolation * (1.0f - extra_weight) + extrapolation * extra_weight;
      }
      f.attention_factor = static_cast<float>(
          s.attention_factor > 0 ? s.attention_factor : (s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0));
      break;
    }
    case Kind::kLongRope: {
      DL_CHECK(static_cast<int>(s.short_factor.size()) == half && static_cast<int>(s.long_factor.size()) == half,
               "rope_scaling: longrope needs %d short and long factors (head_dim / 2), got %zu and %zu", half,
               s.short_factor.size(), s.long_factor.size());
      const int original = s.original_max_position > 0 ? s.original_max_position : max_position;
      const double factor = s.original_max_position > 0 ? static_cast<double>(max_position) / original : s.factor;
      f.inv_freq_long = f.inv_freq;
      for (int i = 0; i < half; ++i) {
        const float base_pow = 1.0f / f.inv_freq[static_cast<size_t>(i)];
        f.inv_freq[static_cast<size_t>(i)] = 1.0f / (static_cast<float>(s.short_factor[static_cast<size_t>(i)]) * base_pow);
        f.inv_freq_long[static_cast<size_t>(i)] = 1.0f / (static_cast<float>(s.long_factor[static_cast<size_t>(i)]) * base_pow);
      }
      f.switch_at = original;
      f.attention_factor = static_cast<float>(
          s.attention_factor > 0 ? s.attention_factor
                                 : (factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(original))));
      break;
    }
  }
  return f;
}

kernels::RopeTable rope_table(const ModelConfig& c, int positions, bool local) {
  if (local) return kernels::RopeTable(c.head_dim, positions, c.rope_local_theta);
  const RopeFrequencies f = rope_frequencies(c.rope_scaling, c.head_dim, c.rope_theta, c.max_position);
  return kernels::RopeTable(c.head_dim, positions, f.inv_freq, f.attention_factor, f.switch_at,
                            f.inv_freq_long.empty() ? nullptr : &f.inv_freq_long);
}

}  // namespace distllm
