// Checkpoint files and directories on one process: round trips, resharded reads,
// retention and `latest`, and refusing damaged checkpoints with a clear message
// (falling back to the previous good one under --resume auto).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "distllm/base/error.h"
#include "distllm/checkpoint/async_saver.h"
#include "distllm/checkpoint/store.h"
#include "distllm/io/file_util.h"

namespace distllm::checkpoint {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/distllm_ckpt_unit_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Three tensors laid out with a padding gap, like ParamLayout's groups.
std::vector<ParamSpan> layout() {
  return {{"a.weight", {4, 5}, 0, 20}, {"a.bias", {5}, 20, 5}, {"b.weight", {3, 3}, 32, 9}};
}
constexpr int64_t kTotal = 48;

std::vector<float> values(float base) {
  std::vector<float> v(kTotal, 0.0f);
  for (const auto& t : layout())
    for (int64_t i = 0; i < t.numel; ++i) v[static_cast<size_t>(t.offset + i)] = base + static_cast<float>(t.offset + i);
  return v;
}

SaveRequest request(int64_t step) {
  SaveRequest r;
  r.step = step;
  r.header.strategy = "none";
  r.header.model_config = {{"model_type", "gpt2"}, {"n_layer", 2}};
  r.header.trainer = {{"step", step}};
  r.header.states = {"param", "exp_avg"};
  return r;
}

// Saves the whole buffer as one rank would.
std::string save(CheckpointStore& store, int64_t step, const std::vector<float>& p, const std::vector<float>& m) {
  ShardData d;
  d.begin = 0, d.end = kTotal;
  d.states = {{"param", p.data()}, {"exp_avg", m.data()}};
  return store.save(request(step), layout(), d).dir;
}

std::string slurp(const std::string& path) { return read_file(path); }

TEST(CheckpointStore, SavesAtomicallyAndReadsBackAnyRange) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{});
  std::vector<float> p = values(1000), m = values(-5);
  std::string dir = save(store, 7, p, m);
  EXPECT_EQ(dir, t.path() + "/step_00000007");
  EXPECT_EQ(slurp(t.path() + "/latest"), "step_00000007\n");
  EXPECT_FALSE(fs::exists(t.path() + "/.partial-step_00000007"));
  CheckpointReader r = CheckpointReader::open(dir);
  EXPECT_EQ(r.manifest().step, 7);
  r.verify_checksums();
  // Any range, crossing tensors and the padding gap (which reads as zero).
  std::vector<float> got(30);
  r.read("param", layout(), 13, 43, got.data());
  for (int64_t i = 13; i < 43; ++i) EXPECT_EQ(got[static_cast<size_t>(i - 13)], p[static_cast<size_t>(i)]) << i;
  std::vector<float> moments(kTotal);
  r.read("exp_avg", layout(), 0, kTotal, moments.data());
  EXPECT_EQ(moments, m);
  EXPECT_THROW(r.read("exp_avg_sq", layout(), 0, 4, got.data()), Error);
}

TEST(CheckpointStore, ShardsFromSeveralWritersReassemble) {
  // Two "ranks" writing halves into one directory, then one reader of the whole.
  TempDir t;
  std::vector<float> p = values(3);
  WrittenFile a = write_shard_file(t.path() + "/rank_00000-of-00002.safetensors", 0, layout(),
                                   ShardData{0, 16, {{"param", p.data()}}});
  WrittenFile b = write_shard_file(t.path() + "/rank_00001-of-00002.safetensors", 1, layout(),
                                   ShardData{16, kTotal, {{"param", p.data() + 16}}});
  Manifest m = request(1).header;
  m.step = 1;
  m.world_size = 2;
  m.states = {"param"};
  m.files = {a.file, b.file};
  for (const auto& s : layout()) {
    TensorEntry e{s.name, s.shape, {}};
    for (const WrittenFile* w : {&a, &b})
      for (const auto& [name, slice] : w->slices)
        if (name == s.name) e.slices.push_back(slice);
    m.tensors.push_back(e);
  }
  write_file_atomic(t.path() + "/manifest.json", m.to_json());
  CheckpointReader r = CheckpointReader::open(t.path());
  r.verify_checksums();
  std::vector<float> got(kTotal);
  r.read("param", layout(), 0, kTotal, got.data());
  EXPECT_EQ(got, p);
  EXPECT_EQ(r.manifest().find("a.weight")->slices.size(), 2u) << "a.weight is split between the two files";
}

TEST(CheckpointStore, RetentionKeepsTheLastKAndEveryMth) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{2, 4});
  std::vector<float> p = values(0), m = values(0);
  for (int64_t step = 1; step <= 9; ++step) save(store, step, p, m);
  std::vector<std::string> names;
  for (const auto& d : store.list()) names.push_back(fs::path(d).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"step_00000009", "step_00000008", "step_00000004"}));
  EXPECT_EQ(slurp(t.path() + "/latest"), "step_00000009\n");
}

TEST(CheckpointStore, DamagedCheckpointsAreRefusedAndAutoFallsBack) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{5, 0});
  std::vector<float> p = values(0), m = values(1);
  save(store, 2, p, m);
  std::string newest = save(store, 4, p, m);
  const std::string file = newest + "/rank_00000-of-00001.safetensors";

  // A flipped byte in the data: caught by the checksum, naming the file.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    char c;
    f.seekg(-3, std::ios::end);
    f.get(c);
    f.seekp(-3, std::ios::end);
    f.put(static_cast<char>(c ^ 0x10));
  }
  try {
    store.find_resume(newest);
    FAIL() << "a corrupt checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file + ": checksum mismatch"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.find_resume("auto").value(), t.path() + "/step_00000002");

  // A truncated manifest: refused as such.
  std::string manifest = slurp(newest + "/manifest.json");
  write_file_atomic(newest + "/manifest.json", manifest.substr(0, manifest.size() / 2));
  try {
    CheckpointReader::open(newest);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON (truncated?)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.find_resume("auto").value(), t.path() + "/step_00000002");

  // A missing shard file.
  fs::remove(t.path() + "/step_00000002/rank_00000-of-00001.safetensors");
  try {
    CheckpointReader::open(t.path() + "/step_00000002");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_00000-of-00001.safetensors: missing"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(store.find_resume("auto").has_value()) << "no good checkpoint is left";
}

TEST(CheckpointStore, AnotherModelIsRefusedNamingTheField) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{});
  std::vector<float> p = values(0), m = values(0);
  CheckpointReader r = CheckpointReader::open(save(store, 1, p, m));
  r.check_compatible({{"model_type", "gpt2"}, {"n_layer", 2}}, layout());
  try {
    r.check_compatible({{"model_type", "gpt2"}, {"n_layer", 3}}, layout());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_layer is 2 in the checkpoint but 3 here"), std::string::npos) << e.what();
  }
  std::vector<ParamSpan> other = layout();
  other[2].shape = {9};
  EXPECT_THROW(r.check_compatible({{"model_type", "gpt2"}, {"n_layer", 2}}, other), Error);
}

TEST(CheckpointStore, LeftoversOfACrashedSaveAreIgnoredThenRemoved) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{});
  std::vector<float> p = values(0), m = values(0);
  save(store, 1, p, m);
  // A save that died half-way: a partial directory with a file and no manifest.
  make_directories(t.path() + "/.partial-step_00000002");
  write_file_atomic(t.path() + "/.partial-step_00000002/rank_00000-of-00001.safetensors", "junk");
  EXPECT_EQ(store.find_resume("auto").value(), t.path() + "/step_00000001");
  save(store, 3, p, m);
  EXPECT_FALSE(fs::exists(t.path() + "/.partial-step_00000002"));
}

TEST(CheckpointStore, AsyncSaveCopiesThenWritesInTheBackground) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{});
  AsyncSaver saver(store);
  std::vector<float> p = values(5), m = values(6);
  ShardData d{0, kTotal, {{"param", p.data()}, {"exp_avg", m.data()}}};
  saver.save(request(1), layout(), d);
  // The live state may change as soon as save() returns: the copy is what is written.
  std::vector<float> original = p;
  std::fill(p.begin(), p.end(), -1.0f);
  SaveResult r = saver.wait();
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::vector<float> got(kTotal);
  CheckpointReader::open(r.dir).read("param", layout(), 0, kTotal, got.data());
  EXPECT_EQ(got, original);
}

// ---- which checkpoint to resume, whose checkpoints retention may remove ----

// A save by the run `run_id`.
Published save_by(CheckpointStore& store, int64_t step, const std::string& run_id) {
  std::vector<float> p = values(static_cast<float>(step)), m = values(0);
  SaveRequest r = request(step);
  r.header.run_id = run_id;
  return store.save(r, layout(), ShardData{0, kTotal, {{"param", p.data()}, {"exp_avg", m.data()}}});
}

std::vector<std::string> step_names(const CheckpointStore& store) {
  std::vector<std::string> names;
  for (const auto& d : store.list()) names.push_back(fs::path(d).filename().string());
  return names;
}

TEST(CheckpointStore, AutoTakesWhatLatestNamesThenTheNewestTheCheckAccepts) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{5, 0});
  for (int64_t step : {2, 4, 6}) save_by(store, step, step == 4 ? "other" : "mine");
  EXPECT_EQ(store.resume_order(), (std::vector<std::string>{t.path() + "/step_00000006", t.path() + "/step_00000004",
                                                            t.path() + "/step_00000002"}));
  // A rollback: `latest` names an older checkpoint, which is taken although newer ones exist.
  write_file_atomic(t.path() + "/latest", "step_00000002\n");
  ResumeChoice c = store.choose_resume("auto");
  EXPECT_EQ(c.dir, t.path() + "/step_00000002");
  EXPECT_EQ(c.latest, t.path() + "/step_00000002");
  EXPECT_TRUE(c.passed_over.empty());

  // `latest` names one the caller refuses: the newest it accepts, the refused ones listed in order.
  write_file_atomic(t.path() + "/latest", "step_00000004\n");
  auto mine_only = [](const CheckpointReader& r) {
    DL_CHECK(r.manifest().run_id == "mine", "run %s", r.manifest().run_id.c_str());
  };
  c = store.choose_resume("auto", mine_only);
  EXPECT_EQ(c.dir, t.path() + "/step_00000006");
  ASSERT_EQ(c.passed_over.size(), 1u);
  EXPECT_EQ(c.passed_over[0].first, t.path() + "/step_00000004");
  EXPECT_EQ(c.passed_over[0].second, "run other");

  // None accepted: none chosen, every one listed with why (latest's first).
  c = store.choose_resume("auto", [](const CheckpointReader&) { throw Error("not this run"); });
  EXPECT_EQ(c.dir, "");
  ASSERT_EQ(c.passed_over.size(), 3u);
  EXPECT_EQ(c.passed_over[0].first, t.path() + "/step_00000004");
  EXPECT_EQ(c.passed_over[1].first, t.path() + "/step_00000006");
  // A step directory named explicitly must pass the check.
  try {
    store.choose_resume(t.path() + "/step_00000004", mine_only);
    FAIL() << "a refused checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resume from " + t.path() + "/step_00000004: run other"),
              std::string::npos) << e.what();
  }
  // No `latest`, or one naming no step directory: the newest.
  fs::remove(t.path() + "/latest");
  EXPECT_EQ(store.choose_resume("auto").dir, t.path() + "/step_00000006");
  write_file_atomic(t.path() + "/latest", "garbage\n");
  EXPECT_EQ(store.choose_resume("auto").latest, "");
  EXPECT_EQ(store.choose_resume("auto").dir, t.path() + "/step_00000006");
}

TEST(CheckpointStore, RetentionRemovesOnlyTheSavingRunsCheckpoints) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{1, 0});
  save_by(store, 1, "old");
  save_by(store, 2, "");  // written before runs had ids
  // A checkpoint whose manifest does not parse: nobody's, kept.
  make_directories(t.path() + "/step_00000003");
  write_file_atomic(t.path() + "/step_00000003/manifest.json", "{\"run_id\": \"new");
  save_by(store, 4, "new");
  save_by(store, 5, "new");
  EXPECT_EQ(step_names(store), (std::vector<std::string>{"step_00000005", "step_00000003", "step_00000002",
                                                          "step_00000001"}))
      << "only run new's step 4 may go";
  // A run that continues unlabelled checkpoints owns them too.
  store.set_own_runs({"new", ""});
  save_by(store, 6, "new");
  EXPECT_EQ(step_names(store), (std::vector<std::string>{"step_00000006", "step_00000003", "step_00000001"}));
}

TEST(CheckpointStore, ASaveThatCannotReplaceLatestIsStillPublished) {
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{5, 0});
  save_by(store, 1, "r");
  // A leftover temporary `latest` of a killed save is removed by the next save.
  write_file_atomic(t.path() + "/latest.tmp.4194305", "step_00000001\n");
  EXPECT_EQ(save_by(store, 2, "r").latest_error, "");
  EXPECT_FALSE(fs::exists(t.path() + "/latest.tmp.4194305"));
  // `latest` cannot be replaced (a non-empty folder in its place; ENOSPC in practice):
  // the checkpoint is published all the same, and the outcome says what became of `latest`.
  fs::remove(t.path() + "/latest");
  make_directories(t.path() + "/latest/x");
  Published p = save_by(store, 3, "r");
  EXPECT_EQ(p.dir, t.path() + "/step_00000003");
  EXPECT_NE(p.latest_error, "");
  EXPECT_TRUE(p.latest_kept) << "a folder cannot be unlinked";
  CheckpointReader::open(p.dir).verify_checksums();
  EXPECT_EQ(store.choose_resume("auto").dir, p.dir) << "`latest` names nothing: the newest is taken";
}


// ---- regions: tensor-parallel shards written as they are held ----

// w [4, 6] split along its columns as gpt2's fused q|k|v is (two ranges each), e
// [5, 3] along its rows, n [3] replicated: two "tp ranks" hold these flat buffers.
const Region kW0{1, {{0, 2}, {3, 5}}}, kW1{1, {{2, 3}, {5, 6}}}, kE0{0, {{0, 3}}}, kE1{0, {{3, 5}}};
float w_at(int64_t i, int64_t j) { return static_cast<float>(100 * i + j); }
float e_at(int64_t i, int64_t j) { return static_cast<float>(1000 + 10 * i + j); }

std::vector<ParamSpan> whole_layout() { return {{"w", {4, 6}, 0, 24}, {"e", {5, 3}, 32, 15}, {"n", {3}, 48, 3}}; }
std::vector<float> whole_values() {
  std::vector<float> v(51, 0.0f);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) v[static_cast<size_t>(i * 6 + j)] = w_at(i, j);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) v[static_cast<size_t>(32 + i * 3 + j)] = e_at(i, j);
  v[48] = 7, v[49] = 8, v[50] = 9;
  return v;
}

// A shard's flat buffer: w's columns of `w`, then e's rows of `e`, then n.
std::vector<float> shard_values(const Region& w, const Region& e) {
  std::vector<float> v;
  for (int64_t i = 0; i < 4; ++i)
    for (auto [b, end] : w.ranges)
      for (int64_t j = b; j < end; ++j) v.push_back(w_at(i, j));
  for (auto [b, end] : e.ranges)
    for (int64_t i = b; i < end; ++i)
      for (int64_t j = 0; j < 3; ++j) v.push_back(e_at(i, j));
  v.insert(v.end(), {7, 8, 9});
  return v;
}

std::vector<ParamSpan> shard_layout(const Region& w, const Region& e, bool with_n) {
  const int64_t nw = region_numel({4, 6}, w), ne = region_numel({5, 3}, e);
  std::vector<ParamSpan> l = {{"w", {4, 6}, 0, nw, w}, {"e", {5, 3}, nw, ne, e}};
  if (with_n) l.push_back({"n", {3}, nw + ne, 3});
  return l;
}

TEST(CheckpointStore, RegionsOfShardsReadBackWholeAndAsAnotherSplit) {
  TempDir t;
  // Shard 0 is written by two "dp ranks" (halves of its flat buffer), shard 1 by
  // one, which leaves out its copy of the replicated n.
  const std::vector<float> s0 = shard_values(kW0, kE0), s1 = shard_values(kW1, kE1);
  const int64_t n0 = static_cast<int64_t>(s0.size()), n1 = static_cast<int64_t>(s1.size());
  std::vector<WrittenFile> written = {
      write_shard_file(t.path() + "/rank_00000-of-00003.safetensors", 0, shard_layout(kW0, kE0, true),
                       ShardData{0, 10, {{"param", s0.data()}}}),
      write_shard_file(t.path() + "/rank_00001-of-00003.safetensors", 1, shard_layout(kW0, kE0, true),
                       ShardData{10, n0, {{"param", s0.data() + 10}}}),
      write_shard_file(t.path() + "/rank_00002-of-00003.safetensors", 2, shard_layout(kW1, kE1, false),
                       ShardData{0, n1, {{"param", s1.data()}}})};
  Manifest m = request(1).header;
  m.step = 1, m.world_size = 3, m.states = {"param"};
  for (const WrittenFile& w : written) m.files.push_back(w.file);
  for (const ParamSpan& s : whole_layout()) {
    TensorEntry e{s.name, s.shape, {}};
    for (const WrittenFile& w : written)
      for (const auto& [name, slice] : w.slices)
        if (name == s.name) e.slices.push_back(slice);
    // Grouped by region, in the order of their first ranges (as the store sorts them).
    auto first = [](const Slice& x) { return x.region.whole() ? int64_t(-1) : x.region.ranges[0].first; };
    std::stable_sort(e.slices.begin(), e.slices.end(), [&](const Slice& a, const Slice& b) { return first(a) < first(b); });
    m.tensors.push_back(e);
  }
  write_file_atomic(t.path() + "/manifest.json", m.to_json());
  CheckpointReader r = CheckpointReader::open(t.path());  // parses: the regions tile each tensor
  EXPECT_EQ(r.manifest().find("w")->slices.size(), 3u) << "w: shard 0 in two files, shard 1 in one";
  // The whole model, as a reader without tensor parallelism (convert) needs it.
  std::vector<float> got(51);
  r.read("param", whole_layout(), 0, 51, got.data());
  EXPECT_EQ(got, whole_values());
  // Another split (w's columns in three ranges, e's rows as shard 0's), and a
  // range of it that starts and ends inside tensors.
  const Region w3{1, {{4, 6}}};
  const std::vector<float> want = shard_values(w3, kE0);
  std::vector<float> part(want.size());
  r.read("param", shard_layout(w3, kE0, true), 0, static_cast<int64_t>(want.size()), part.data());
  EXPECT_EQ(part, want);
  std::vector<float> middle(10);
  r.read("param", shard_layout(w3, kE0, true), 5, 15, middle.data());
  EXPECT_EQ(middle, std::vector<float>(want.begin() + 5, want.begin() + 15));
}

// A manifest of w [4, 6] whose slices are `slices` (file f).
std::string manifest_with(const std::vector<Slice>& slices) {
  Manifest m = request(1).header;
  m.step = 1, m.states = {"param"};
  m.files = {FileEntry{"f", 0, 100, 1}};
  m.tensors = {TensorEntry{"w", {4, 6}, slices}};
  return m.to_json();
}

TEST(CheckpointManifest, RegionsMustTileTheTensor) {
  auto error_of = [](const std::vector<Slice>& slices) {
    try {
      Manifest::parse(manifest_with(slices), "m.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto cols = [](int64_t b, int64_t e) { return Region{1, {{b, e}}}; };
  EXPECT_EQ(error_of({{"f", 0, 12, cols(0, 3)}, {"f", 0, 12, cols(3, 6)}}), "");
  EXPECT_NE(error_of({{"f", 0, 12, cols(0, 3)}, {"f", 0, 16, cols(2, 6)}}).find("its regions overlap on axis 1 at 2"),
            std::string::npos);
  EXPECT_NE(error_of({{"f", 0, 8, cols(0, 2)}, {"f", 0, 12, cols(3, 6)}}).find("its regions leave a gap in axis 1 at 2"),
            std::string::npos);
  EXPECT_NE(error_of({{"f", 0, 8, cols(0, 2)}}).find("its regions cover 2 of the 6 indices of axis 1"),
            std::string::npos);
  EXPECT_NE(error_of({{"f", 0, 6, cols(0, 3)}, {"f", 0, 12, cols(3, 6)}})
                .find("its slices cover 6 of the 12 elements of its region axis 1 [0, 3)"),
            std::string::npos);
  EXPECT_NE(error_of({{"f", 0, 12, {}}, {"f", 0, 12, cols(3, 6)}}).find("mixes whole-tensor slices with regions"),
            std::string::npos);
  EXPECT_NE(error_of({{"f", 0, 20, cols(4, 9)}}).find("has an invalid region"), std::string::npos);
  EXPECT_NE(error_of({{"f", 0, 12, Region{2, {{0, 1}}}}}).find("axis 2 of a tensor of 2 dimensions"),
            std::string::npos);
}

TEST(CheckpointStore, ASaveMissingARegionIsNotPublished) {
  // One rank holding shard 0 alone (its peer's regions are missing): the manifest
  // would not tile w and e, so the save fails and `latest` is not written.
  TempDir t;
  CheckpointStore store(t.path(), nullptr, Retention{});
  const std::vector<float> s0 = shard_values(kW0, kE0);
  SaveRequest req = request(1);
  req.header.states = {"param"};
  for (const ParamSpan& s : whole_layout()) req.header.tensors.push_back({s.name, s.shape, {}});
  try {
    store.save(req, shard_layout(kW0, kE0, true), ShardData{0, static_cast<int64_t>(s0.size()), {{"param", s0.data()}}});
    FAIL() << "an incomplete checkpoint was published";
  } catch (const SaveError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor w: its regions leave a gap in axis 1 at 2"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(t.path() + "/latest"));
  EXPECT_TRUE(store.list().empty());
}


// The fuzz seeds of the manifest parser double as a regression corpus with the exact
// error each must produce (a seed without an expectation fails).
TEST(CheckpointManifest, MalformedCorpusGetsClearErrors) {
  const std::map<std::string, std::string> expected = {
      {"ok.json", ""},
      {"truncated.json", "not valid JSON (truncated?)"},
      {"future_version.json", "format version 2 is not supported"},
      {"gap.json", "slices must tile the tensor in order, without gaps or overlaps"},
      {"overlap.json", "covers [3, 6) but the next element is 4"},
      {"short.json", "tensor b.bias: its slices cover 2 of its 3 elements"},
      {"escape.json", "\"name\" must be a plain file name"},
      {"unknown_file.json", "names a file that is not in \"files\": rank_00009-of-00002.safetensors"},
      {"bad_checksum_text.json", "\"xxh64\" must be 16 lowercase hex digits"},
      {"huge_shape.json", "is impossibly large (over 2^42 elements)"},
      {"duplicate_tensor.json", "has an empty or repeated name"},
      {"no_trainer.json", "the manifest has no \"trainer\""},
      {"negative_step.json", "\"step\" = -1 is outside"},
      {"wrong_format.json", "\"format\" is not \"distllm-checkpoint\""},
  };
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(DISTLLM_SOURCE_DIR "/fuzz/corpus/fuzz_checkpoint_manifest")) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "seed has no expected outcome; add it to this test";
    ++seen;
    std::string error;
    try {
      Manifest::parse(read_file(entry.path().string()), name);
    } catch (const Error& e) {
      error = e.what();
    }
    if (it->second.empty())
      EXPECT_EQ(error, "");
    else
      EXPECT_NE(error.find(it->second), std::string::npos) << "error was: " << error;
  }
  EXPECT_EQ(seen, static_cast<int>(expected.size()));
}

}  // namespace
}  // namespace distllm::checkpoint
