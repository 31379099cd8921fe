#include "distllm/model/model_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <set>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/io/file_util.h"

namespace distllm {

namespace fs = std::filesystem;

namespace {

// The folder a path names, without a trailing slash ("." and "out/" included).
fs::path normalized_target(const std::string& dir) {
  DL_CHECK(!dir.empty(), "the model output folder is empty");
  fs::path target = fs::absolute(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  DL_CHECK(target != target.root_path(), "%s: refusing to write a model over the filesystem root", dir.c_str());
  return target;
}

std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::set<std::string> marker_files(const fs::path& dir) {
  std::set<std::string> files;
  fs::path marker = dir / kModelDirMarker;
  if (!fs::is_regular_file(marker)) return files;
  for (const std::string& line : split(read_file(marker.string()), '\n'))
    if (!line.empty()) files.insert(line);
  files.insert(kModelDirMarker);
  return files;
}

bool is_distllm_model_dir(const fs::path& dir) { return fs::is_regular_file(dir / kModelDirMarker); }

std::string list_some(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + ("'" + names[i] + "'");
  if (names.size() > 5) out += strprintf(" and %zu more", names.size() - 5);
  return out;
}

// Validates what is at the target now; returns true when it must be replaced in
// place (an `overwrite` of a folder that is not a model directory).
bool check_existing(const fs::path& target, const std::string& shown, bool overwrite) {
  std::error_code ec;
  fs::file_status st = fs::symlink_status(target, ec);
  if (ec || !fs::exists(st)) return false;
  DL_CHECK(fs::is_directory(fs::status(target)), "%s: exists and is not a folder; choose a folder for the model",
           shown.c_str());
  std::vector<std::string> names = entries_of(target);
  if (names.empty() || is_distllm_model_dir(target)) return false;
  DL_CHECK(overwrite,
           "%s: the folder is not empty and is not a model directory written by distllm (it holds %s); choose an "
           "empty or new folder, or pass --overwrite to replace only the model files in it",
           shown.c_str(), list_some(names).c_str());
  return true;
}

// A model file, or the temporary write_file_atomic makes of one (`NAME.tmp.PID`).
bool is_model_file_or_temporary(const std::string& name) {
  size_t at = name.rfind(".tmp.");
  if (at != std::string::npos && name.find_first_not_of("0123456789", at + 5) == std::string::npos)
    return is_model_file_name(name.substr(0, at));
  return is_model_file_name(name);
}

bool process_alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Calls `remove` for each sibling `<name><infix><pid>` of `target` whose process no
// longer runs (what a process killed while it wrote the model left).
void remove_stale_siblings(const fs::path& target, const std::string& infix,
                           const std::function<bool(const fs::path&)>& remove) {
  const std::string prefix = target.filename().string() + infix;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    int pid = std::atoi(pid_text.c_str());
    if (pid == ::getpid() || process_alive(pid)) continue;
    if (remove(e.path())) LOG_INFO("removed %s left by process %d, which is gone", e.path().c_str(), pid);
  }
}

// Partial folders `<name>.partial-<pid>` of processes that no longer run.
void remove_stale_partials(const fs::path& target) {
  remove_stale_siblings(target, ".partial-", [](const fs::path& partial) {
    std::error_code ec;
    if (!fs::is_directory(fs::symlink_status(partial, ec))) return false;
    // Only ever holds model files this code wrote; remove them, then the folder.
    bool only_model_files = true;
    for (const std::string& f : entries_of(partial)) only_model_files &= is_model_file_or_temporary(f);
    if (!only_model_files) {
      LOG_WARN("%s: left in place (it holds files that are not model files)", partial.c_str());
      return false;
    }
    fs::remove_all(partial, ec);
    return !ec;
  });
}

// Removes the model files of `dir` (the previous model, after the swap) and the
// folder itself when nothing else is left; anything else is kept and named.
void remove_model_files(const fs::path& dir) {
  std::vector<std::string> kept;
  for (const std::string& f : entries_of(dir)) {
    fs::path p = dir / f;
    if (is_model_file_name(f) && fs::is_regular_file(fs::symlink_status(p)))
      fs::remove(p);
    else
      kept.push_back(f);
  }
  if (kept.empty())
    fs::remove(dir);
  else
    LOG_WARN("%s: kept (holds %s, which are not model files)", dir.c_str(), list_some(kept).c_str());
}

}  // namespace

bool is_model_file_name(const std::string& name) {
  static const std::set<std::string> fixed = {
      "config.json",      "generation_config.json", "model.safetensors", "model.safetensors.index.json",
      "tokenizer.json",   "tokenizer_config.json",  "special_tokens_map.json", "vocab.json",
      "merges.txt",       "chat_template.jinja",    kModelDirMarker,
  };
  if (fixed.count(name)) return true;
  static const std::regex shard("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return std::regex_match(name, shard);
}

void check_model_output(const std::string& dir, bool overwrite, int64_t bytes_needed) {
  fs::path target = normalized_target(dir);
  check_existing(target, dir, overwrite);
  fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  DL_CHECK(!ec, "%s: cannot create the folder %s: %s", dir.c_str(), parent.c_str(), ec.message().c_str());
  // Write a probe next to where the partial folder will go: a read-only or full
  // filesystem is found now, not after the whole run. The probe has no name
  // (O_TMPFILE), so even a kill -9 leaves nothing behind; filesystems without
  // O_TMPFILE get a named one, `<dir>.probe-<pid>`, which the next run removes if
  // its process is gone.
  remove_stale_siblings(target, ".probe-", [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(fs::symlink_status(p, ec)) && fs::remove(p, ec);
  });
  std::string probe;
  int fd = ::open(parent.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL || errno == ENOENT)) {
    probe = target.string() + strprintf(".probe-%d", static_cast<int>(::getpid()));
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  DL_CHECK(fd >= 0, "%s: cannot write in %s: %s", dir.c_str(), parent.c_str(), std::strerror(errno));
  char block[4096] = {0};
  bool wrote = ::write(fd, block, sizeof block) == static_cast<ssize_t>(sizeof block) && ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!probe.empty()) ::unlink(probe.c_str());
  DL_CHECK(wrote, "%s: cannot write in %s: %s", dir.c_str(), parent.c_str(), std::strerror(err));
  struct statvfs vfs;
  if (bytes_needed > 0 && ::statvfs(parent.c_str(), &vfs) == 0) {
    const double free_bytes = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
    DL_CHECK(free_bytes >= static_cast<double>(bytes_needed),
             "%s: the model needs about %.1f MB but the filesystem of %s has %.1f MB free", dir.c_str(),
             bytes_needed / 1e6, parent.c_str(), free_bytes / 1e6);
  }
}

ModelDirWriter::ModelDirWriter(const std::string& dir, bool overwrite)
    : target_(normalized_target(dir).string()), overwrite_(overwrite) {
  check_existing(target_, dir, overwrite);
  make_directories(fs::path(target_).parent_path().string());
  remove_stale_partials(target_);
  staging_ = target_ + strprintf(".partial-%d", static_cast<int>(::getpid()));
  fs::remove_all(staging_);
  make_directories(staging_);
}

ModelDirWriter::~ModelDirWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void ModelDirWriter::commit() {
  DL_CHECK(!committed_, "%s: committed twice", target_.c_str());
  for (const std::string& f : files_)
    DL_CHECK(is_model_file_name(f), "%s: '%s' is not a model file name", target_.c_str(), f.c_str());
  std::string marker;
  for (const std::string& f : files_) marker += f + "\n";
  write_file_atomic((fs::path(staging_) / kModelDirMarker).string(), marker);
  fsync_directory(staging_);

  // Checked again: the target may have changed during the run.
  fs::path target(target_);
  if (check_existing(target, target_, overwrite_)) {
    replace_in_place();
  } else if (!fs::exists(fs::symlink_status(target))) {
    fs::rename(staging_, target);
  } else if (fs::is_empty(target)) {
    fs::rename(staging_, target);  // replaces an empty folder in one step
  } else {
    // A distllm model directory: exchange the two in one step, then clear out the
    // old one (now at the staging path), keeping anything a user put beside it.
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
      DL_CHECK(errno == EINVAL || errno == ENOSYS, "%s: cannot swap in the new model: %s", target_.c_str(),
               std::strerror(errno));
      // Filesystems without RENAME_EXCHANGE: two renames; a kill between them
      // leaves the previous model at `<dir>.old-<pid>`.
      LOG_WARN("%s: this filesystem cannot exchange folders atomically; replacing in two steps", target_.c_str());
      std::string old = target_ + strprintf(".old-%d", static_cast<int>(::getpid()));
      fs::rename(target, old);
      fs::rename(staging_, target);
      staging_ = old;
    }
    std::set<std::string> new_files(files_.begin(), files_.end());
    new_files.insert(kModelDirMarker);
    std::set<std::string> old_files = marker_files(staging_);
    for (const std::string& f : entries_of(staging_)) {
      if (old_files.count(f) || new_files.count(f)) continue;
      fs::rename(fs::path(staging_) / f, target / f);  // a user's file: keep it
    }
    remove_model_files(staging_);
  }
  fsync_directory(target.parent_path().string());
  committed_ = true;
}

void ModelDirWriter::replace_in_place() {
  // `--overwrite` of a folder that holds other things: move each new file in (one
  // atomic rename each) and remove only model files the new model does not have
  // (an earlier save's extra shards). Nothing else in the folder is touched.
  fs::path target(target_);
  std::set<std::string> new_files(files_.begin(), files_.end());
  new_files.insert(kModelDirMarker);
  for (const std::string& f : entries_of(target)) {
    fs::path p = target / f;
    if (is_model_file_name(f) && !new_files.count(f) && fs::is_regular_file(fs::symlink_status(p))) fs::remove(p);
  }
  for (const std::string& f : new_files) {
    fs::path existing = target / f;
    DL_CHECK(!fs::exists(fs::symlink_status(existing)) || fs::is_regular_file(fs::symlink_status(existing)),
             "%s: '%s' exists and is not a file; not replacing it", target_.c_str(), f.c_str());
    // The marker goes in last, so the folder is only called a model once complete.
    if (f == kModelDirMarker) continue;
    fs::rename(fs::path(staging_) / f, existing);
  }
  fs::rename(fs::path(staging_) / kModelDirMarker, target / kModelDirMarker);
  fs::remove(staging_);
}

}  // namespace distllm
