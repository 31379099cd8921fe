#include "distllm/checkpoint/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "distllm/base/strings.h"
#include "distllm/comm/text_collectives.h"
#include "distllm/io/file_util.h"

namespace distllm::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using comm::allgather_text;
using comm::broadcast_text;

std::string describe(const std::exception& e) { return e.what(); }

// One slice a rank wrote, as its save report carries it to rank 0.
json slice_json(const std::string& tensor, const Slice& s, const std::vector<ParamSpan>& layout) {
  json j = {{"name", tensor}, {"begin", s.begin}, {"end", s.end}};
  for (const ParamSpan& t : layout)
    if (t.name == tensor) j["shape"] = t.shape;
  if (!s.region.whole()) j["region"] = {{"axis", s.region.axis}, {"ranges", s.region.ranges}};
  return j;
}

Slice slice_of(const json& j, const std::string& file) {
  Slice s{file, j["begin"], j["end"], {}};
  if (j.contains("region")) {
    s.region.axis = j["region"]["axis"];
    s.region.ranges = j["region"]["ranges"].get<std::vector<std::pair<int64_t, int64_t>>>();
  }
  return s;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, comm::ProcessGroupPtr group, Retention retention)
    : dir_(std::move(dir)), group_(std::move(group)), retention_(retention) {
  DL_CHECK(!dir_.empty(), "checkpoint directory must not be empty");
  DL_CHECK(retention_.keep_last >= 1, "--keep-last must be at least 1, got %d", retention_.keep_last);
  DL_CHECK(retention_.keep_every >= 0, "--keep-every must be >= 0");
}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    int64_t s = parse_step_dir_name(name);
    if (s >= 0 && e.is_directory()) steps.emplace_back(s, e.path().string());
  }
  std::sort(steps.rbegin(), steps.rend());
  std::vector<std::string> out;
  for (auto& s : steps) out.push_back(s.second);
  return out;
}

Published CheckpointStore::save(const SaveRequest& request, const std::vector<ParamSpan>& layout,
                                const ShardData& shard) {
  comm::ProcessGroup* g = group_.get();
  const int rank = g ? g->rank() : 0, n = g ? g->size() : 1;
  const std::string name = step_dir_name(request.step);
  const std::string partial = join_path(dir_, ".partial-" + name);
  const std::string final_dir = join_path(dir_, name);
  // 1. Rank 0 prepares a clean partial directory (removing leftovers of crashed
  // saves: partial directories, and a temporary `latest` of a process killed while
  // it replaced it; rank 0 of the run is the only writer of both).
  std::string error;
  if (rank == 0) {
    try {
      make_directories(dir_);
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const std::string leftover = e.path().filename().string();
        if (leftover.rfind(".partial-", 0) == 0 || leftover.rfind("latest.tmp.", 0) == 0) fs::remove_all(e.path(), ec);
      }
      make_directories(partial);
    } catch (const std::exception& e) {
      error = describe(e);
    }
  }
  error = broadcast_text(g, error);
  if (!error.empty()) throw SaveError(strprintf("checkpoint %s not saved: %s", name.c_str(), error.c_str()));

  // 2. Every rank writes its file.
  std::string report;
  try {
    WrittenFile w = write_shard_file(join_path(partial, rank_file_name(rank, n)), rank, layout, shard);
    json slices = json::array();
    for (const auto& [t, s] : w.slices) slices.push_back(slice_json(t, s, layout));
    report = json({{"ok", true},
                   {"file", {{"name", w.file.name}, {"rank", rank}, {"bytes", w.file.bytes}, {"xxh64", w.file.xxh64}}},
                   {"slices", slices},
                   {"state", request.rank_state}})
                 .dump();
  } catch (const std::exception& e) {
    report = json({{"ok", false}, {"error", strprintf("rank %d: %s", rank, e.what())}}).dump();
  }
  std::vector<std::string> reports = allgather_text(g, report);
  if (const char* k = std::getenv("DISTLLM_TEST_KILL_DURING_SAVE"))
    if (rank == 0 && std::atoll(k) == request.step) std::raise(SIGKILL);

  // 3. Rank 0 publishes (or cleans up), and tells everyone.
  Published published;
  published.dir = final_dir;
  if (rank == 0) {
    try {
      Manifest m = request.header;
      m.step = request.step;
      m.run_id = request.header.run_id;
      m.world_size = n;
      m.ranks = json::array();
      m.tensors.clear();
      m.files.clear();
      std::map<std::string, std::vector<Slice>> slices;
      // The tensors: the whole model's when the caller lists them (ranks holding
      // parts), else this rank's layout's, then any other a rank reported.
      std::vector<TensorEntry> tensors = request.header.tensors;
      if (tensors.empty())
        for (const ParamSpan& t : layout) tensors.push_back({t.name, t.shape, {}});
      for (const std::string& text : reports) {
        json r = json::parse(text);
        if (!r["ok"].get<bool>()) throw Error(r["error"].get<std::string>());
        FileEntry f;
        f.name = r["file"]["name"];
        f.rank = r["file"]["rank"];
        f.bytes = r["file"]["bytes"];
        f.xxh64 = r["file"]["xxh64"];
        m.files.push_back(f);
        for (const auto& s : r["slices"]) {
          const std::string name = s["name"];
          if (slices.find(name) == slices.end() &&
              std::none_of(tensors.begin(), tensors.end(), [&](const TensorEntry& t) { return t.name == name; }))
            tensors.push_back({name, s["shape"].get<std::vector<int64_t>>(), {}});
          slices[name].push_back(slice_of(s, f.name));
        }
        m.ranks.push_back(r["state"]);
      }
      for (TensorEntry& e : tensors) {
        e.slices = slices[e.name];
        // Grouped by region, in the order of their first range; in order inside one.
        auto key = [](const Slice& s) {
          return std::make_pair(s.region.whole() ? int64_t(-1) : s.region.ranges.front().first, s.begin);
        };
        std::sort(e.slices.begin(), e.slices.end(), [&](const Slice& a, const Slice& b) { return key(a) < key(b); });
        m.tensors.push_back(std::move(e));
      }
      write_file_atomic(join_path(partial, kManifestName), m.to_json());
      Manifest::parse(read_file(join_path(partial, kManifestName)), partial);  // what we wrote must read back
      fsync_directory(partial);
      std::error_code ec;
      if (fs::exists(final_dir)) {
        // Re-saving a step (after a resume): the old copy goes only once the new one is complete.
        const std::string old = join_path(dir_, ".partial-replaced-" + name);
        fs::rename(final_dir, old, ec);
        if (ec) throw Error(strprintf("%s: cannot move aside: %s", final_dir.c_str(), ec.message().c_str()));
      }
      fs::rename(partial, final_dir, ec);
      if (ec) throw Error(strprintf("%s: rename failed: %s", final_dir.c_str(), ec.message().c_str()));
      fsync_directory(dir_);
    } catch (const std::exception& e) {
      error = describe(e);
      std::error_code ec;
      fs::remove_all(partial, ec);
    }
    // Published: what fails from here on does not unsave it.
    if (error.empty()) {
      const std::string latest = join_path(dir_, "latest");
      try {
        write_file_atomic(latest, name + "\n");
      } catch (const std::exception& e) {
        // `latest` must not go on naming an older checkpoint than this one: without
        // it, --resume auto takes the newest checkpoint, this one.
        published.latest_error = describe(e);
        published.latest_kept = ::unlink(latest.c_str()) != 0 && errno != ENOENT;
        fsync_directory(dir_);
      }
      try {
        apply_retention(request.step, request.header.run_id);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "warning: %s: retention after saving %s failed: %s\n", dir_.c_str(), name.c_str(),
                     e.what());
      }
    }
  }
  error = broadcast_text(g, error);
  if (!error.empty()) throw SaveError(strprintf("checkpoint %s not saved: %s", name.c_str(), error.c_str()));
  // Every rank returns the same outcome.
  json outcome = json::parse(broadcast_text(
      g, json({{"latest_error", published.latest_error}, {"latest_kept", published.latest_kept}}).dump()));
  published.latest_error = outcome["latest_error"].get<std::string>();
  published.latest_kept = outcome["latest_kept"].get<bool>();
  return published;
}

bool CheckpointStore::owned(const std::string& step_dir, const std::string& run_id) const {
  // Only the run id is needed: a manifest that does not even parse as JSON is not
  // known to be ours, and is kept.
  std::error_code ec;
  if (!fs::is_regular_file(join_path(step_dir, kManifestName), ec)) return false;
  json m = json::parse(read_file(join_path(step_dir, kManifestName)), nullptr, false);
  if (!m.is_object()) return false;
  const std::string id = m.contains("run_id") && m["run_id"].is_string() ? m["run_id"].get<std::string>() : "";
  if (own_runs_.empty()) return id == run_id;
  return std::find(own_runs_.begin(), own_runs_.end(), id) != own_runs_.end();
}

void CheckpointStore::apply_retention(int64_t newest, const std::string& run_id) const {
  std::vector<std::string> all = list();
  int kept = 0;
  std::error_code ec;
  for (const std::string& d : all) {
    const int64_t step = parse_step_dir_name(fs::path(d).filename().string());
    bool ours = false;
    try {
      ours = owned(d, run_id);
    } catch (const std::exception&) {
      ours = false;  // unreadable: kept
    }
    if (!ours) continue;
    const bool recent = kept < retention_.keep_last;
    const bool history = retention_.keep_every > 0 && step % retention_.keep_every == 0;
    if (recent || history || step == newest) {
      kept += recent ? 1 : 0;
      continue;
    }
    fs::remove_all(d, ec);
  }
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.path().filename().string().rfind(".partial-replaced-", 0) == 0) fs::remove_all(e.path(), ec);
}

std::string CheckpointStore::verify(const std::string& step_dir, const ResumeCheck& check) {
  comm::ProcessGroup* g = group_.get();
  const int rank = g ? g->rank() : 0, n = g ? g->size() : 1;
  std::string why;
  try {
    CheckpointReader r = CheckpointReader::open(step_dir);
    std::vector<std::string> mine;
    for (size_t i = 0; i < r.manifest().files.size(); ++i)
      if (static_cast<int>(i % static_cast<size_t>(n)) == rank) mine.push_back(r.manifest().files[i].name);
    if (!mine.empty()) r.verify_checksums(mine);
    // A damaged checkpoint is named as such first, whatever run wrote it.
    if (check) check(r);
  } catch (const std::exception& e) {
    why = e.what();
  }
  // The first rank's complaint, if any, decides for everyone.
  std::vector<std::string> all = allgather_text(g, why);
  for (const std::string& w : all)
    if (!w.empty()) return w;
  return "";
}

std::string CheckpointStore::latest_target() const {
  std::error_code ec;
  const std::string path = join_path(dir_, "latest");
  if (!fs::is_regular_file(path, ec)) return "";
  std::string name;
  try {
    name = read_file(path);
  } catch (const std::exception&) {
    return "";
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return parse_step_dir_name(name) >= 0 ? join_path(dir_, name) : "";
}

std::vector<std::string> CheckpointStore::resume_order() const {
  const std::string latest = latest_target();
  std::vector<std::string> steps = list(), order;
  if (std::find(steps.begin(), steps.end(), latest) != steps.end()) order.push_back(latest);
  for (const std::string& d : steps)
    if (d != latest) order.push_back(d);
  return order;
}

ResumeChoice CheckpointStore::choose_resume(const std::string& spec, const ResumeCheck& check) {
  ResumeChoice choice;
  if (spec != "auto") {
    std::string dir = is_directory(spec) ? spec : join_path(dir_, spec);
    std::string why = verify(dir, check);
    DL_CHECK(why.empty(), "cannot resume from %s: %s", dir.c_str(), why.c_str());
    choice.dir = dir;
    return choice;
  }
  // Rank 0 lists; everyone checks the same candidates in the same order: the one
  // `latest` names first, then the others newest first.
  json listed = {{"latest", ""}, {"candidates", json::array()}};
  if (!group_ || group_->rank() == 0) listed = {{"latest", latest_target()}, {"candidates", resume_order()}};
  listed = json::parse(broadcast_text(group_.get(), listed.dump()));
  choice.latest = listed["latest"].get<std::string>();
  for (const std::string& d : listed["candidates"].get<std::vector<std::string>>()) {
    std::string why = verify(d, check);
    if (why.empty()) {
      choice.dir = d;
      break;
    }
    choice.passed_over.emplace_back(d, why);
  }
  return choice;
}

std::optional<std::string> CheckpointStore::find_resume(const std::string& spec) {
  ResumeChoice choice = choose_resume(spec);
  if (!group_ || group_->rank() == 0)
    for (const auto& [d, why] : choice.passed_over)
      std::fprintf(stderr, "warning: skipping checkpoint %s: %s\n", d.c_str(), why.c_str());
  if (choice.dir.empty()) return std::nullopt;
  return choice.dir;
}

}  // namespace distllm::checkpoint
