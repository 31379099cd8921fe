#include "distllm/serve/model_watch.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/model/model_dir.h"

namespace distllm::serve {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // as the safetensors reader allows

// Empty when `path` is a complete safetensors file, else what is wrong with it.
std::string safetensors_problem(const std::string& path, uint64_t size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot be opened";
  unsigned char len_bytes[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8)) return path + ": shorter than a safetensors header";
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes || 8 + header_len > size)
    return strprintf("%s: %llu bytes, shorter than its header says", path.c_str(), static_cast<unsigned long long>(size));
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len))) return path + ": header cannot be read";
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return path + ": the header is not a JSON object";
  uint64_t end = 0;
  for (const auto& [name, t] : j.items()) {
    if (name == "__metadata__") continue;
    if (!t.is_object() || !t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2 ||
        !t["data_offsets"][1].is_number_unsigned())
      return path + ": tensor '" + name + "' has no data_offsets";
    end = std::max(end, t["data_offsets"][1].get<uint64_t>());
  }
  const uint64_t expected = 8 + header_len + end;
  if (size != expected)
    return strprintf("%s: %llu bytes but its header describes %llu", path.c_str(), static_cast<unsigned long long>(size),
                     static_cast<unsigned long long>(expected));
  return "";
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ModelDirState inspect_model_dir(const std::string& dir) {
  ModelDirState st;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    st.problem = dir + ": not a directory";
    return st;
  }
  // Every model file present, by name, with its identity.
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (is_model_file_name(name)) names.push_back(name);
  }
  if (ec) {
    st.problem = dir + ": cannot be listed: " + ec.message();
    return st;
  }
  std::sort(names.begin(), names.end());
  std::set<std::string> present(names.begin(), names.end());
  auto path_of = [&](const std::string& name) { return (fs::path(dir) / name).string(); };

  if (!present.count("config.json")) {
    st.problem = dir + ": no config.json";
    return st;
  }
  nlohmann::json config = nlohmann::json::parse(read_small_file(path_of("config.json")), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    st.problem = dir + "/config.json: not a JSON object (yet)";
    return st;
  }
  if (present.count(kModelDirMarker)) {
    std::istringstream marker(read_small_file(path_of(kModelDirMarker)));
    for (std::string line; std::getline(marker, line);) {
      if (!line.empty() && !present.count(line)) {
        st.problem = dir + ": the model marker lists " + line + ", which is missing";
        return st;
      }
    }
  }
  std::vector<std::string> weights;
  if (present.count("model.safetensors")) {
    weights.push_back("model.safetensors");
  } else if (present.count("model.safetensors.index.json")) {
    nlohmann::json index = nlohmann::json::parse(read_small_file(path_of("model.safetensors.index.json")), nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      st.problem = dir + "/model.safetensors.index.json: no weight_map";
      return st;
    }
    std::set<std::string> shards;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (file.is_string()) shards.insert(file.get<std::string>());
    }
    for (const std::string& s : shards) {
      if (!present.count(s)) {
        st.problem = dir + ": the index names " + s + ", which is missing";
        return st;
      }
      weights.push_back(s);
    }
  } else {
    st.problem = dir + ": no model.safetensors or model.safetensors.index.json";
    return st;
  }

  std::string sig;
  for (const std::string& name : names) {
    struct stat sb {};
    if (::stat(path_of(name).c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) {
      st.problem = dir + "/" + name + ": vanished or not a file";
      return st;
    }
    if (std::find(weights.begin(), weights.end(), name) != weights.end()) {
      std::string p = safetensors_problem(path_of(name), static_cast<uint64_t>(sb.st_size));
      if (!p.empty()) {
        st.problem = p;
        return st;
      }
    }
    sig += strprintf("%s dev=%llu ino=%llu size=%lld mtime=%lld.%09ld\n", name.c_str(),
                     static_cast<unsigned long long>(sb.st_dev), static_cast<unsigned long long>(sb.st_ino),
                     static_cast<long long>(sb.st_size), static_cast<long long>(sb.st_mtim.tv_sec),
                     static_cast<long>(sb.st_mtim.tv_nsec));
  }
  st.complete = true;
  st.signature = std::move(sig);
  return st;
}

ModelDirState inspect_checkpoint_dir(const std::string& dir) {
  ModelDirState st;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    st.problem = dir + ": not a directory";
    return st;
  }
  const std::string latest_path = (fs::path(dir) / "latest").string();
  if (!fs::exists(latest_path, ec)) {
    st.problem = dir + ": no checkpoint yet (no 'latest')";
    return st;
  }
  std::string step = read_small_file(latest_path);
  step = step.substr(0, step.find('\n'));
  if (step.empty() || step.find('/') != std::string::npos || step == "." || step == "..") {
    st.problem = dir + "/latest: does not name a step directory";
    return st;
  }
  const std::string manifest = (fs::path(dir) / step / "manifest.json").string();
  struct stat sb {};
  if (::stat(manifest.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st.problem = manifest + ": missing";
    return st;
  }
  st.complete = true;
  st.signature = strprintf("checkpoint %s dev=%llu ino=%llu size=%lld mtime=%lld.%09ld\n", step.c_str(),
                           static_cast<unsigned long long>(sb.st_dev), static_cast<unsigned long long>(sb.st_ino),
                           static_cast<long long>(sb.st_size), static_cast<long long>(sb.st_mtim.tv_sec),
                           static_cast<long>(sb.st_mtim.tv_nsec));
  return st;
}

ModelDirState inspect_watched(const std::string& dir, WatchedKind kind) {
  return kind == WatchedKind::kCheckpointDir ? inspect_checkpoint_dir(dir) : inspect_model_dir(dir);
}

ModelChangeDetector::ModelChangeDetector(std::string dir, std::string loaded_signature, WatchedKind kind)
    : dir_(std::move(dir)), kind_(kind), loaded_(std::move(loaded_signature)) {}

bool ModelChangeDetector::poll() {
  ModelDirState st = inspect_watched(dir_, kind_);
  problem_ = st.problem;
  const bool stable = st.complete && st.signature == previous_;
  previous_ = st.complete ? st.signature : "";
  if (!stable || st.signature == loaded_) return false;
  candidate_ = st.signature;
  return true;
}

void ModelChangeDetector::set_loaded(std::string signature) { loaded_ = std::move(signature); }

}  // namespace distllm::serve
