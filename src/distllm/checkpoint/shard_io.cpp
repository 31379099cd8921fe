#include "distllm/checkpoint/shard_io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/checkpoint/file_hash.h"
#include "distllm/io/file_util.h"

namespace distllm::checkpoint {

WrittenFile write_shard_file(const std::string& path, int rank, const std::vector<ParamSpan>& layout,
                             const ShardData& shard) {
  WrittenFile out;
  out.file.name = path.substr(path.find_last_of('/') + 1);
  out.file.rank = rank;
  SafetensorsWriter w;
  for (const ParamSpan& t : layout) {
    const int64_t lo = std::max(shard.begin, t.offset), hi = std::min(shard.end, t.offset + t.numel);
    if (lo >= hi) continue;
    for (const auto& [state, data] : shard.states)
      w.add_f32(state_key(state, t.name), {hi - lo}, data + (lo - shard.begin));
    out.slices.push_back({t.name, Slice{out.file.name, lo - t.offset, hi - t.offset, t.region}});
  }
  w.set_metadata("format", kFormat);
  w.set_metadata("rank", std::to_string(rank));
  Xxh64 hash;
  uint64_t bytes = 0;
  w.write(path, [&](const void* p, size_t n) {
    hash.update(p, n);
    bytes += n;
  });
  out.file.bytes = bytes;
  out.file.xxh64 = hash.digest();
  return out;
}

CheckpointReader CheckpointReader::open(const std::string& dir) {
  CheckpointReader r;
  r.dir_ = dir;
  const std::string path = join_path(dir, kManifestName);
  DL_CHECK(file_exists(path), "%s: not a checkpoint (no %s)", dir.c_str(), kManifestName);
  r.manifest_ = Manifest::parse(read_file(path), path);
  for (const FileEntry& f : r.manifest_.files) {
    const std::string p = join_path(dir, f.name);
    struct stat st;
    DL_CHECK(::stat(p.c_str(), &st) == 0, "%s: missing (listed in the checkpoint's manifest)", p.c_str());
    DL_CHECK(static_cast<uint64_t>(st.st_size) == f.bytes, "%s: %lld bytes, but the manifest records %llu (truncated?)",
             p.c_str(), static_cast<long long>(st.st_size), static_cast<unsigned long long>(f.bytes));
  }
  return r;
}

void CheckpointReader::verify_checksums(const std::vector<std::string>& files) const {
  for (const FileEntry& f : manifest_.files) {
    if (!files.empty() && std::find(files.begin(), files.end(), f.name) == files.end()) continue;
    const std::string p = join_path(dir_, f.name);
    const uint64_t got = hash_file(p);
    DL_CHECK(got == f.xxh64, "%s: checksum mismatch (XXH64 %s, the manifest records %s): the file is corrupt",
             p.c_str(), hex64(got).c_str(), hex64(f.xxh64).c_str());
  }
}

void CheckpointReader::check_compatible(const nlohmann::json& model_config, const std::vector<ParamSpan>& layout) const {
  const nlohmann::json& saved = manifest_.model_config;
  for (auto it = model_config.begin(); it != model_config.end(); ++it) {
    auto s = saved.find(it.key());
    DL_CHECK(s != saved.end() && *s == it.value(),
             "%s: the checkpoint is of another model: %s is %s in the checkpoint but %s here", dir_.c_str(),
             it.key().c_str(), s == saved.end() ? "absent" : s->dump().c_str(), it.value().dump().c_str());
  }
  for (auto it = saved.begin(); it != saved.end(); ++it)
    DL_CHECK(model_config.contains(it.key()), "%s: the checkpoint is of another model: it has %s = %s, absent here",
             dir_.c_str(), it.key().c_str(), it.value().dump().c_str());
  for (const ParamSpan& t : layout) {
    const TensorEntry* e = manifest_.find(t.name);
    DL_CHECK(e != nullptr, "%s: the checkpoint has no tensor %s", dir_.c_str(), t.name.c_str());
    DL_CHECK(e->shape == t.shape, "%s: tensor %s has another shape in the checkpoint", dir_.c_str(), t.name.c_str());
  }
}

const SafetensorsFile& CheckpointReader::file(const std::string& name) const {
  auto it = open_.find(name);
  if (it == open_.end())
    it = open_.emplace(name, std::make_shared<SafetensorsFile>(SafetensorsFile::open(join_path(dir_, name)))).first;
  return *it->second;
}

void CheckpointReader::read(const std::string& state, const std::vector<ParamSpan>& layout, int64_t begin,
                            int64_t end, float* out) const {
  DL_CHECK(std::find(manifest_.states.begin(), manifest_.states.end(), state) != manifest_.states.end(),
           "%s: the checkpoint has no state '%s'", dir_.c_str(), state.c_str());
  if (end > begin) std::memset(out, 0, sizeof(float) * static_cast<size_t>(end - begin));
  for (const ParamSpan& t : layout) {
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const TensorEntry* e = manifest_.find(t.name);
    const int64_t whole_numel = region_numel(t.shape, Region{});
    DL_CHECK(e != nullptr && e->numel() == whole_numel && (t.region.whole() || e->shape == t.shape),
             "%s: the checkpoint has no tensor %s of %lld elements", dir_.c_str(), t.name.c_str(),
             static_cast<long long>(whole_numel));
    DL_CHECK(region_numel(t.shape, t.region) == t.numel, "internal error: the span of %s holds %lld elements, not %lld",
             t.name.c_str(), static_cast<long long>(t.numel), static_cast<long long>(region_numel(t.shape, t.region)));
    // The elements needed, [lo, hi) of the span, as runs of the whole tensor; each
    // slice's as well; where they meet, the slice's bytes are copied.
    const std::vector<Run> need = region_runs(t.shape, t.region, lo - t.offset, hi - t.offset);
    const int64_t need_lo = need.front().whole, need_hi = need.back().whole + need.back().n;
    for (const Slice& s : e->slices) {
      const std::vector<Run> have = region_runs(e->shape, s.region, s.begin, s.end);
      if (have.empty() || have.back().whole + have.back().n <= need_lo || have.front().whole >= need_hi) continue;
      const SafetensorsFile& f = file(s.file);
      const std::string key = state_key(state, t.name);
      const TensorInfo* info = f.find(key);
      DL_CHECK(info != nullptr, "%s: %s has no tensor %s (the manifest says it holds [%lld, %lld))",
               f.origin().c_str(), s.file.c_str(), key.c_str(), (long long)s.begin, (long long)s.end);
      DL_CHECK(info->dtype == DType::kF32 && info->shape == std::vector<int64_t>{s.end - s.begin},
               "%s: %s is not an F32 vector of %lld elements", f.origin().c_str(), key.c_str(),
               (long long)(s.end - s.begin));
      const uint8_t* bytes = f.bytes(*info).data();
      // Both lists are sorted by whole index and do not overlap themselves.
      size_t i = 0, j = 0;
      while (i < need.size() && j < have.size()) {
        const Run& a = need[i];
        const Run& b = have[j];
        const int64_t x0 = std::max(a.whole, b.whole), x1 = std::min(a.whole + a.n, b.whole + b.n);
        if (x0 < x1)
          std::memcpy(out + (t.offset + a.local + (x0 - a.whole) - begin),
                      bytes + (b.local + (x0 - b.whole) - s.begin) * 4, static_cast<size_t>(x1 - x0) * 4);
        if (a.whole + a.n <= b.whole + b.n)
          ++i;
        else
          ++j;
      }
    }
  }
}

}  // namespace distllm::checkpoint
