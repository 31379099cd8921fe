// pytorch_model.bin (torch.save's zip + pickle) through the restricted unpickler:
// values of f32/f16/bf16, transposed and offset views equal what was saved; a model
// directory of .bin files (single or sharded) gives the logits of its safetensors
// twin; malicious pickles are refused by name without running; damaged archives
// give clear errors. Each file is written both by real torch.save (python3-torch)
// and by tests/reference/torch_bin.py's standard-library emulation of it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/io/torch_pickle.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/train_graph.h"
#include "model/torch_runner.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

class TorchBin : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_torchbin_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return join_path(dir_, name); }
  std::string dir_;
};

float value(float base, int64_t j) { return static_cast<float>(j % 17) * 0.25f - 2 + base; }

std::vector<float> f32_of(const TorchCheckpointFile& f, const std::string& name) {
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    if (f.tensors()[i].name != name) continue;
    std::vector<float> out(static_cast<size_t>(f.tensors()[i].numel()));
    convert_to_f32(f.tensors()[i].dtype, f.bytes(i).data(), out.data(), out.size());
    return out;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

void check_state(const std::string& file) {
  SCOPED_TRACE(file);
  auto f = TorchCheckpointFile::open(file);
  ASSERT_EQ(f.tensors().size(), 6u);
  const char* order[] = {"a.f32", "b.f16", "c.bf16", "d.t", "e.full", "e.view"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(f.tensors()[i].name, order[i]);
  EXPECT_EQ(f.tensors()[0].dtype, DType::kF32);
  EXPECT_EQ(f.tensors()[1].dtype, DType::kF16);
  EXPECT_EQ(f.tensors()[2].dtype, DType::kBF16);
  EXPECT_EQ(f.tensors()[3].shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(f.tensors()[5].shape, (std::vector<int64_t>{2, 3}));
  auto a = f32_of(f, "a.f32"), b = f32_of(f, "b.f16"), c = f32_of(f, "c.bf16"), d = f32_of(f, "d.t"),
       e = f32_of(f, "e.full"), v = f32_of(f, "e.view");
  for (int j = 0; j < 12; ++j) EXPECT_EQ(a[j], value(0, j)) << j;
  for (int j = 0; j < 5; ++j) EXPECT_EQ(b[j], value(1, j)) << j;
  for (int j = 0; j < 6; ++j) EXPECT_EQ(c[j], value(0.5f, j)) << j;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(d[i * 3 + j], a[j * 4 + i]) << i << "," << j;  // the transpose
  for (int j = 0; j < 10; ++j) EXPECT_EQ(e[j], value(2, j)) << j;
  for (int j = 0; j < 6; ++j) EXPECT_EQ(v[j], value(2, 4 + j)) << j;  // offset 4 into e's storage
}

TEST_F(TorchBin, EmulatedStateDictLoadsExactly) {
  ASSERT_EQ(testing::run_reference("torch_bin.py", "state " + path("s.bin")), 0);
  check_state(path("s.bin"));
}

TEST_F(TorchBin, Zip64ArchiveLoadsExactly) {
  ASSERT_EQ(testing::run_reference("torch_bin.py", "state " + path("s.bin") + " --zip64"), 0);
  check_state(path("s.bin"));
}

TEST_F(TorchBin, RealTorchSaveStateDictLoadsExactly) {
  DISTLLM_SKIP_WITHOUT_TORCH();
  ASSERT_EQ(testing::run_reference("torch_bin.py", "state " + path("s.bin") + " --torch"), 0);
  check_state(path("s.bin"));
}

TEST_F(TorchBin, RealTorchSaveOfAParameterLoads) {
  DISTLLM_SKIP_WITHOUT_TORCH();
  ASSERT_EQ(testing::run_reference("torch_bin.py", "param " + path("p.bin")), 0);
  auto f = TorchCheckpointFile::open(path("p.bin"));
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f32_of(f, "p"), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

ModelConfig small_config(ModelFamily f) {
  ModelConfig c;
  c.family = f;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = f == ModelFamily::kGpt2 ? 4 : 2, c.n_embd = 40, c.vocab_size = 99;
  c.max_position = 32, c.tie_embeddings = f == ModelFamily::kGpt2, c.rope_theta = 10000.0;
  c.normalize();
  return c;
}

std::vector<float> logits_of(Transformer& m) {
  const int B = 2, T = 7;
  std::vector<int32_t> tokens(B * T), targets(B * T, 0);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 99);
  TrainGraph g(m.config(), B, T);
  std::vector<float> logits(static_cast<size_t>(B) * T * m.config().vocab_size);
  g.forward(m, tokens.data(), targets.data(), false, 1.0f, logits.data());
  return logits;
}

void check_model_twins(const std::string& dir, bool use_torch) {
  for (auto f : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    for (int shards : {1, 3}) {
      SCOPED_TRACE(small_config(f).family_name() + " shards " + std::to_string(shards));
      Transformer m(small_config(f));
      m.init_weights(7);
      const std::string st = join_path(dir, "st"), bin = join_path(dir, "bin");
      save_hf_model(m, st);
      ASSERT_EQ(testing::run_reference("torch_bin.py", "model " + st + " " + bin + " --shards " +
                                                           std::to_string(shards) + (use_torch ? " --torch" : "")),
                0);
      EXPECT_EQ(file_exists(join_path(bin, "pytorch_model.bin.index.json")), shards > 1);
      auto from_st = load_hf_model(st);
      auto from_bin = load_hf_model(bin);
      ASSERT_EQ(from_bin->size(), from_st->size());
      for (int64_t i = 0; i < from_st->size(); ++i) ASSERT_EQ(from_bin->params()[i], from_st->params()[i]) << i;
      EXPECT_EQ(logits_of(*from_bin), logits_of(*from_st));
      fs::remove_all(st);
      fs::remove_all(bin);
    }
  }
}

TEST_F(TorchBin, EmulatedModelDirectoryGivesSafetensorsLogits) { check_model_twins(dir_, false); }

TEST_F(TorchBin, RealTorchModelDirectoryGivesSafetensorsLogits) {
  DISTLLM_SKIP_WITHOUT_TORCH();
  check_model_twins(dir_, true);
}

TEST_F(TorchBin, MaliciousGlobalsAreRefusedWithoutRunning) {
  struct Case {
    const char* kind;
    const char* global;
  };
  for (Case c : {Case{"os", "os.system"}, Case{"posix", "posix.system"}, Case{"eval", "builtins.eval"},
                 Case{"subprocess", "subprocess.call"}, Case{"nested", "os.system"}}) {
    SCOPED_TRACE(c.kind);
    const std::string bin = path(std::string(c.kind) + ".bin"), marker = path(std::string(c.kind) + ".marker");
    ASSERT_EQ(testing::run_reference("torch_bin.py", std::string("malicious ") + bin + " " + c.kind + " " + marker), 0);
    // The pickle is live: Python's own unpickler runs it and the marker appears.
    ASSERT_EQ(testing::run_reference("torch_bin.py", "unpickle " + bin + " >/dev/null"), 0);
    ASSERT_TRUE(file_exists(marker)) << "the crafted pickle did not run under Python's pickle";
    fs::remove(marker);
    try {
      TorchCheckpointFile::open(bin);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("refused global ") + c.global), std::string::npos) << e.what();
    }
    EXPECT_FALSE(file_exists(marker)) << "the malicious pickle ran";
  }
}

TEST_F(TorchBin, DamagedArchivesAndPicklesGiveClearErrors) {
  ASSERT_EQ(testing::run_reference("torch_bin.py", "state " + path("s.bin")), 0);
  const std::string good = read_file(path("s.bin"));
  auto error_of = [](const std::string& bytes) -> std::string {
    try {
      TorchCheckpointFile::parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "x.bin");
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(error_of("").find("not a zip archive"), std::string::npos);
  EXPECT_NE(error_of(std::string(100, 'g')).find("not a zip archive"), std::string::npos);
  // Cut anywhere: never accepted, never a crash.
  for (size_t cut = 0; cut < good.size(); cut += 7) EXPECT_NE(error_of(good.substr(0, cut)), "accepted") << cut;
  std::string bad = good;
  // An opcode no state dict uses, in place of the pickle's first byte after PROTO.
  const size_t pkl = good.find(std::string("\x80\x02", 2), good.find("archive/data.pkl"));
  ASSERT_NE(pkl, std::string::npos);
  bad[pkl + 2] = 'S';  // STRING: text-mode protocol 0, refused
  EXPECT_NE(error_of(bad).find("opcode 0x53"), std::string::npos) << error_of(bad);
  bad = good;
  bad.replace(good.find("little"), 6, "bigend");
  EXPECT_NE(error_of(bad).find("byteorder"), std::string::npos) << error_of(bad);
}

TEST_F(TorchBin, ModelLoaderPrefersSafetensorsAndNamesBothFormatsWhenMissing) {
  Transformer m(small_config(ModelFamily::kGpt2));
  m.init_weights(5);
  save_hf_model(m, path("m"));
  write_file_atomic(path("m/pytorch_model.bin"), "not read: safetensors wins");
  EXPECT_EQ(load_hf_model(path("m"))->params()[0], m.params()[0]);
  fs::remove(path("m/model.safetensors"));
  try {
    load_hf_model(path("m"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin: not a zip archive"), std::string::npos) << e.what();
  }
  fs::remove(path("m/pytorch_model.bin"));
  try {
    load_hf_model(path("m"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no model.safetensors, model.safetensors.index.json, pytorch_model.bin"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace distllm
