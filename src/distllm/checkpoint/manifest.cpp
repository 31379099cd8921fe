#include "distllm/checkpoint/manifest.h"

#include <algorithm>
#include <set>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/checkpoint/file_hash.h"

namespace distllm::checkpoint {

using nlohmann::json;

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string step_dir_name(int64_t step) { return strprintf("step_%08lld", static_cast<long long>(step)); }

int64_t parse_step_dir_name(const std::string& name) {
  if (name.size() < 6 || name.compare(0, 5, "step_") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (int64_t(1) << 50)) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string rank_file_name(int rank, int world) { return strprintf("rank_%05d-of-%05d.safetensors", rank, world); }

std::string state_key(const std::string& state, const std::string& tensor) { return state + "/" + tensor; }

std::string Manifest::to_json() const {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["step"] = step;
  if (!run_id.empty()) j["run_id"] = run_id;
  j["world_size"] = world_size;
  j["strategy"] = strategy;
  j["mesh"] = mesh;
  j["model_config"] = model_config;
  j["training"] = training;
  j["trainer"] = trainer;
  j["ranks"] = ranks;
  j["states"] = states;
  j["dtype"] = "F32";
  json ts = json::array();
  for (const auto& t : tensors) {
    json sl = json::array();
    for (const auto& s : t.slices) {
      json e = {{"file", s.file}, {"begin", s.begin}, {"end", s.end}};
      if (!s.region.whole()) {
        e["axis"] = s.region.axis;
        e["ranges"] = s.region.ranges;
      }
      sl.push_back(std::move(e));
    }
    ts.push_back({{"name", t.name}, {"shape", t.shape}, {"slices", sl}});
  }
  j["tensors"] = ts;
  json fs = json::array();
  for (const auto& f : files)
    fs.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"xxh64", hex64(f.xxh64)}});
  j["files"] = fs;
  return j.dump(1) + "\n";
}

namespace {

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw_error(strprintf("%s: invalid checkpoint manifest: %s", origin.c_str(), what.c_str()));
}

const json& need(const json& j, const char* key, const std::string& origin, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) bad(origin, strprintf("%s has no \"%s\"", where.c_str(), key));
  return *it;
}

int64_t need_int(const json& j, const char* key, const std::string& origin, const std::string& where, int64_t lo,
                 int64_t hi) {
  const json& v = need(j, key, origin, where);
  if (!v.is_number_integer()) bad(origin, strprintf("%s \"%s\" must be an integer", where.c_str(), key));
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? -1 : v.get<int64_t>();
  if (x < lo || x > hi)
    bad(origin, strprintf("%s \"%s\" = %lld is outside [%lld, %lld]", where.c_str(), key, (long long)x, (long long)lo,
                          (long long)hi));
  return x;
}

std::string need_string(const json& j, const char* key, const std::string& origin, const std::string& where) {
  const json& v = need(j, key, origin, where);
  if (!v.is_string()) bad(origin, strprintf("%s \"%s\" must be a string", where.c_str(), key));
  return v.get<std::string>();
}

bool plain_name(const std::string& s) {
  return !s.empty() && s.size() < 256 && s.find('/') == std::string::npos && s != "." && s != ".." &&
         s.find('\0') == std::string::npos;
}


Region parse_region(const json& slice, const std::vector<int64_t>& shape, const std::string& origin,
                    const std::string& where) {
  Region r;
  if (!slice.contains("axis")) return r;
  r.axis = static_cast<int>(need_int(slice, "axis", origin, where, 0, 7));
  const json& ranges = need(slice, "ranges", origin, where);
  if (!ranges.is_array() || ranges.empty() || ranges.size() > (1u << 20))
    bad(origin, where + " \"ranges\" must be a non-empty array of [begin, end] pairs");
  for (const json& p : ranges) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      bad(origin, where + " \"ranges\" must be a non-empty array of [begin, end] pairs");
    r.ranges.emplace_back(p[0].get<int64_t>(), p[1].get<int64_t>());
  }
  const std::string why = region_error(shape, r);
  if (!why.empty()) bad(origin, where + " has an invalid region: " + why);
  return r;
}

// The slices of one tensor: in order, each region's (or the whole tensor's) tiling
// it, and the regions tiling their common axis.
std::vector<Slice> parse_slices(const json& slices, const std::vector<int64_t>& shape, int64_t numel,
                                const std::set<std::string>& file_names, const std::string& origin,
                                const std::string& where) {
  std::vector<Slice> out;
  std::vector<Region> regions;
  int64_t at = 0;
  auto close_region = [&] {
    if (regions.empty() || regions.back().whole()) return;
    const int64_t n = region_numel(shape, regions.back());
    if (at != n)
      bad(origin, strprintf("%s: its slices cover %lld of the %lld elements of its region %s", where.c_str(),
                            (long long)at, (long long)n, describe_region(regions.back()).c_str()));
  };
  for (size_t k = 0; k < slices.size(); ++k) {
    std::string sw = strprintf("%s slices[%zu]", where.c_str(), k);
    if (!slices[k].is_object()) bad(origin, sw + " must be an object");
    Slice s;
    s.file = need_string(slices[k], "file", origin, sw);
    if (!file_names.count(s.file)) bad(origin, sw + " names a file that is not in \"files\": " + s.file);
    s.region = parse_region(slices[k], shape, origin, sw);
    if (regions.empty() || !(s.region == regions.back())) {
      close_region();
      if (!regions.empty() && (s.region.whole() || regions.back().whole()))
        bad(origin, where + " mixes whole-tensor slices with regions");
      regions.push_back(s.region);
      at = 0;
    }
    const int64_t n = region_numel(shape, s.region);
    s.begin = need_int(slices[k], "begin", origin, sw, 0, n);
    s.end = need_int(slices[k], "end", origin, sw, 0, n);
    if (s.begin != at || s.end <= s.begin)
      bad(origin, strprintf("%s covers [%lld, %lld) but the next element is %lld (slices must tile the tensor in "
                            "order, without gaps or overlaps)",
                            sw.c_str(), (long long)s.begin, (long long)s.end, (long long)at));
    at = s.end;
    out.push_back(std::move(s));
  }
  if (regions.empty() || regions.front().whole()) {
    if (at != numel)
      bad(origin, strprintf("%s: its slices cover %lld of its %lld elements", where.c_str(), (long long)at,
                            (long long)numel));
    return out;
  }
  close_region();
  // The regions tile one axis: their ranges, in order, leave no gap or overlap.
  const int axis = regions.front().axis;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Region& r : regions) {
    if (r.axis != axis) bad(origin, where + " has regions along different axes");
    ranges.insert(ranges.end(), r.ranges.begin(), r.ranges.end());
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t along = 0;
  for (auto [b, e] : ranges) {
    if (b != along)
      bad(origin, strprintf("%s: its regions %s axis %d at %lld", where.c_str(), b < along ? "overlap on" : "leave a gap in",
                            axis, (long long)std::min(b, along)));
    along = e;
  }
  if (along != shape[static_cast<size_t>(axis)])
    bad(origin, strprintf("%s: its regions cover %lld of the %lld indices of axis %d", where.c_str(), (long long)along,
                          (long long)shape[static_cast<size_t>(axis)], axis));
  return out;
}
}  // namespace

Manifest Manifest::parse(std::string_view text, const std::string& origin) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) bad(origin, "not valid JSON (truncated?)");
  if (!j.is_object()) bad(origin, "not a JSON object");
  if (need_string(j, "format", origin, "the manifest") != kFormat)
    bad(origin, strprintf("\"format\" is not \"%s\"", kFormat));
  const int64_t version = need_int(j, "version", origin, "the manifest", 1, 1000000);
  if (version != kVersion)
    bad(origin, strprintf("format version %lld is not supported (this build reads version %d)", (long long)version,
                          kVersion));
  Manifest m;
  m.step = need_int(j, "step", origin, "the manifest", 0, int64_t(1) << 50);
  m.world_size = static_cast<int>(need_int(j, "world_size", origin, "the manifest", 1, 1 << 20));
  m.strategy = need_string(j, "strategy", origin, "the manifest");
  if (j.contains("run_id")) m.run_id = need_string(j, "run_id", origin, "the manifest");
  for (const char* key : {"mesh", "model_config", "training", "trainer"}) {
    const json& v = need(j, key, origin, "the manifest");
    if (!v.is_object()) bad(origin, strprintf("\"%s\" must be an object", key));
  }
  m.mesh = j["mesh"];
  m.model_config = j["model_config"];
  m.training = j["training"];
  m.trainer = j["trainer"];
  const json& ranks = need(j, "ranks", origin, "the manifest");
  if (!ranks.is_array()) bad(origin, "\"ranks\" must be an array");
  m.ranks = ranks;
  if (need_string(j, "dtype", origin, "the manifest") != "F32") bad(origin, "\"dtype\" must be \"F32\"");
  const json& states = need(j, "states", origin, "the manifest");
  if (!states.is_array() || states.empty()) bad(origin, "\"states\" must be a non-empty array");
  for (const auto& s : states) {
    if (!s.is_string() || !plain_name(s.get<std::string>())) bad(origin, "\"states\" must hold plain names");
    m.states.push_back(s.get<std::string>());
  }

  const json& files = need(j, "files", origin, "the manifest");
  if (!files.is_array() || files.empty()) bad(origin, "\"files\" must be a non-empty array");
  std::set<std::string> file_names;
  for (size_t i = 0; i < files.size(); ++i) {
    const json& f = files[i];
    std::string where = strprintf("files[%zu]", i);
    if (!f.is_object()) bad(origin, where + " must be an object");
    FileEntry e;
    e.name = need_string(f, "name", origin, where);
    if (!plain_name(e.name)) bad(origin, where + " \"name\" must be a plain file name");
    if (!file_names.insert(e.name).second) bad(origin, "file " + e.name + " is listed twice");
    e.rank = static_cast<int>(need_int(f, "rank", origin, where, 0, 1 << 20));
    e.bytes = static_cast<uint64_t>(need_int(f, "bytes", origin, where, 8, int64_t(1) << 50));
    if (!parse_hex64(need_string(f, "xxh64", origin, where), &e.xxh64))
      bad(origin, where + " \"xxh64\" must be 16 lowercase hex digits");
    m.files.push_back(e);
  }

  const json& tensors = need(j, "tensors", origin, "the manifest");
  if (!tensors.is_array() || tensors.empty()) bad(origin, "\"tensors\" must be a non-empty array");
  std::set<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    std::string where = strprintf("tensors[%zu]", i);
    if (!t.is_object()) bad(origin, where + " must be an object");
    TensorEntry e;
    e.name = need_string(t, "name", origin, where);
    if (e.name.empty() || !names.insert(e.name).second) bad(origin, where + " has an empty or repeated name");
    where = "tensor " + e.name;
    const json& shape = need(t, "shape", origin, where);
    if (!shape.is_array() || shape.size() > 8) bad(origin, where + " \"shape\" must be an array of at most 8 sizes");
    int64_t numel = 1;
    for (const auto& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t(1) << 40))
        bad(origin, where + " has an invalid dimension");
      const int64_t dim = d.get<int64_t>();
      e.shape.push_back(dim);
      if (dim > 0 && numel > (int64_t(1) << 42) / dim) bad(origin, where + " is impossibly large (over 2^42 elements)");
      numel *= dim;
    }
    const json& slices = need(t, "slices", origin, where);
    if (!slices.is_array()) bad(origin, where + " \"slices\" must be an array");
    e.slices = parse_slices(slices, e.shape, numel, file_names, origin, where);
    m.tensors.push_back(std::move(e));
  }
  return m;
}

const TensorEntry* Manifest::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const FileEntry* Manifest::file(const std::string& name) const {
  for (const auto& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace distllm::checkpoint
