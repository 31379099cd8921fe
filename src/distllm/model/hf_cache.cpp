#include "distllm/model/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {
namespace fs = std::filesystem;
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool is_cache_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir / "snapshots", ec) && !fs::exists(dir / "config.json", ec);
}

std::string trimmed_first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\n')) line.pop_back();
  return line;
}

fs::path snapshot_of(const fs::path& cache) {
  const fs::path ref = cache / "refs" / "main";
  std::error_code ec;
  if (fs::is_regular_file(ref, ec)) {
    const std::string commit = trimmed_first_line(ref);
    DL_CHECK(!commit.empty() && commit.find('/') == std::string::npos && commit != "." && commit != "..",
             "%s holds no commit name", ref.string().c_str());
    const fs::path snap = cache / "snapshots" / commit;
    DL_CHECK(fs::is_directory(snap, ec), "%s names snapshot %s, which %s does not hold (an interrupted download?)",
             ref.string().c_str(), commit.c_str(), (cache / "snapshots").string().c_str());
    return snap;
  }
  std::vector<fs::path> snaps;
  for (const auto& e : fs::directory_iterator(cache / "snapshots", ec))
    if (e.is_directory()) snaps.push_back(e.path());
  DL_CHECK(!snaps.empty(), "%s has no snapshot (an interrupted download?)", cache.string().c_str());
  if (snaps.size() > 1) {
    std::string names;
    for (const auto& s : snaps) names += (names.empty() ? "" : ", ") + s.filename().string();
    throw Error(strprintf("%s has several snapshots (%s) and no refs/main: pass the snapshot folder itself",
                          cache.string().c_str(), names.c_str()));
  }
  return snaps[0];
}

// "ORG/NAME" as the hub spells a repository id: two non-empty parts, no dots alone.
bool looks_like_hub_id(const std::string& spec) {
  const size_t slash = spec.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == spec.size()) return false;
  if (spec.find('/', slash + 1) != std::string::npos) return false;
  if (spec[0] == '.' || spec[0] == '~') return false;
  return true;
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (std::string v = env_or_empty("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env_or_empty("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (std::string v = env_or_empty("XDG_CACHE_HOME"); !v.empty()) return (fs::path(v) / "huggingface" / "hub").string();
  return (fs::path(env_or_empty("HOME")) / ".cache" / "huggingface" / "hub").string();
}

std::string resolve_model_dir(const std::string& spec) {
  std::error_code ec;
  const fs::path path(spec);
  if (fs::is_directory(path, ec)) return is_cache_folder(path) ? snapshot_of(path).string() : spec;
  if (fs::exists(path, ec) || !looks_like_hub_id(spec)) return spec;
  const std::string folder = "models--" + spec.substr(0, spec.find('/')) + "--" + spec.substr(spec.find('/') + 1);
  const fs::path cache = fs::path(hf_hub_cache_dir()) / folder;
  DL_CHECK(fs::is_directory(cache, ec),
           "--model %s is neither a directory nor in the Hugging Face cache (looked for %s; set HF_HUB_CACHE or "
           "HF_HOME to another cache; nothing is downloaded)",
           spec.c_str(), cache.string().c_str());
  return snapshot_of(cache).string();
}

std::string default_served_model_name(const std::string& spec) {
  std::error_code ec;
  const fs::path path(spec);
  if (!fs::exists(path, ec) && looks_like_hub_id(spec)) return spec;
  fs::path full = fs::absolute(path, ec).lexically_normal();
  if (full.filename().empty()) full = full.parent_path();  // "dir/" names dir
  const std::string name = full.filename().string();
  const std::string prefix = "models--";
  const size_t sep = name.find("--", prefix.size());
  if (name.rfind(prefix, 0) == 0 && sep != std::string::npos && is_cache_folder(path))
    return name.substr(prefix.size(), sep - prefix.size()) + "/" + name.substr(sep + 2);
  return name;
}

}  // namespace distllm
