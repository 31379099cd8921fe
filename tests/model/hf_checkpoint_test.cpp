// Model directories: distllm -> PyTorch reference and PyTorch reference -> distllm
// (including bf16 and sharded saves), plus errors on damaged directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/memory_stats.h"
#include "distllm/base/rng.h"
#include "distllm/io/file_util.h"
#include "distllm/io/safetensors.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/inference.h"
#include "distllm/model/train_graph.h"
#include "model/torch_runner.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

class HfDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/distllm_hf_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

ModelConfig small_config(ModelFamily f) {
  ModelConfig c;
  c.family = f;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = f == ModelFamily::kGpt2 ? 4 : 2, c.n_embd = 40, c.vocab_size = 333;
  c.max_position = 32, c.tie_embeddings = f == ModelFamily::kGpt2, c.rope_theta = 10000.0;
  c.normalize();
  return c;
}

std::vector<float> logits_of(Transformer& m, const std::vector<int32_t>& tokens, int B, int T) {
  TrainGraph g(m.config(), B, T);
  std::vector<float> logits(static_cast<size_t>(B) * T * m.config().vocab_size);
  std::vector<int32_t> targets(tokens.size(), 0);
  g.forward(m, tokens.data(), targets.data(), false, 1.0f, logits.data());
  return logits;
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(HfDir, SaveLoadRoundTripIsExactIncludingShards) {
  for (auto f : {ModelFamily::kGpt2, ModelFamily::kLlama, ModelFamily::kGemma3Text}) {
    for (uint64_t shard : {0ull, 20000ull}) {
      Transformer m(small_config(f));
      m.init_weights(11);
      std::string d = join_path(dir_, "m");
      SaveOptions opt;
      opt.max_shard_bytes = shard;
      opt.extra_files["tokenizer.json"] = "{}";
      save_hf_model(m, d, opt);
      EXPECT_EQ(file_exists(join_path(d, "model.safetensors.index.json")), shard != 0);
      EXPECT_TRUE(file_exists(join_path(d, "tokenizer.json")));
      auto loaded = load_hf_model(d);
      ASSERT_EQ(loaded->size(), m.size());
      for (int64_t i = 0; i < m.size(); ++i) ASSERT_EQ(loaded->params()[i], m.params()[i]);
      // Saving again over an existing directory replaces it atomically.
      save_hf_model(m, d);
      EXPECT_FALSE(file_exists(join_path(d, "model.safetensors.index.json")));
      fs::remove_all(d);
    }
  }
}

TEST_F(HfDir, DistllmSaveLoadsInPyTorchReferenceWithSameLogits) {
  DISTLLM_SKIP_WITHOUT_TORCH();
  for (auto f : {ModelFamily::kGpt2, ModelFamily::kLlama, ModelFamily::kGemma2, ModelFamily::kGemma3Text}) {
    Transformer m(small_config(f));
    m.init_weights(21);
    // Norm weights off their initial values (Gemma's start at 0, the identity).
    CounterRng rng(5);
    for (const auto& t : m.layout().tensors())
      if (t.shape.size() == 1)
        for (int64_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] += 0.2f * rng.normal();
    std::string d = join_path(dir_, "ours");
    SaveOptions opt;
    opt.max_shard_bytes = f == ModelFamily::kGpt2 ? 0 : 30000;
    save_hf_model(m, d, opt);
    std::vector<int32_t> tokens(2 * 13);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 333);
    SafetensorsWriter w;
    w.add("tokens", DType::kI32, {2, 13}, tokens.data());
    w.write(join_path(dir_, "tokens.safetensors"));
    ASSERT_EQ(testing::run_reference("hf_roundtrip.py", "logits " + d + " " + join_path(dir_, "tokens.safetensors") +
                                                            " " + join_path(dir_, "ref.safetensors")),
              0);
    auto ref = SafetensorsFile::open(join_path(dir_, "ref.safetensors")).read_f32("logits");
    EXPECT_LT(rel_error(logits_of(m, tokens, 2, 13), ref), 1e-5) << m.config().family_name();
    fs::remove_all(d);
  }
}

TEST_F(HfDir, PyTorchReferenceSavesLoadIntoDistllmWithSameLogits) {
  DISTLLM_SKIP_WITHOUT_TORCH();
  struct Variant {
    const char* family;
    const char* flags;
  };
  for (Variant v : {Variant{"gpt2", ""}, Variant{"gpt2", "--bf16 --shards 3 --no-prefix"}, Variant{"llama", ""},
                    Variant{"llama", "--bf16"}, Variant{"llama", "--shards 2"}, Variant{"llama31", "--bf16"},
                    Variant{"qwen2", ""}, Variant{"qwen2", "--bf16 --shards 2"}, Variant{"qwen3", ""},
                    Variant{"qwen3", "--bf16"}, Variant{"phi3", ""}, Variant{"phi3", "--bf16 --shards 2"},
                    Variant{"mistral", ""}, Variant{"mistral", "--bf16 --shards 2"},
                    Variant{"gemma2", ""}, Variant{"gemma2", "--bf16 --shards 2"}, Variant{"gemma3", ""},
                    Variant{"gemma3", "--bf16"}}) {
    SCOPED_TRACE(std::string(v.family) + " " + v.flags);
    std::string d = join_path(dir_, "theirs");
    ASSERT_EQ(testing::run_reference("hf_roundtrip.py", "make " + d + " " + v.family + " " + v.flags), 0);
    auto model = load_hf_model(d);
    auto expected = SafetensorsFile::open(join_path(d, "expected.safetensors"));
    const TensorInfo& ti = expected.get("tokens");
    std::vector<int32_t> tokens(static_cast<size_t>(ti.numel()));
    std::memcpy(tokens.data(), expected.bytes(ti).data(), tokens.size() * 4);
    const int B = static_cast<int>(ti.shape[0]), T = static_cast<int>(ti.shape[1]);
    auto ours = logits_of(*model, tokens, B, T);
    const std::vector<float> theirs = expected.read_f32("logits");
    EXPECT_LT(rel_error(ours, theirs), 1e-5);
    // And through the inference path, from the mapped files in their own dtype: the
    // last position of the first sequence.
    InferenceModel im(map_hf_model(d));
    PagedKvCache cache(im.shard_config(), 4, 16, DType::kF32);
    const std::vector<int32_t> table = {0, 1};  // 16-token blocks; phi3's sequences have 24
    std::vector<float> last;
    im.forward({InferenceChunk{tokens.data(), T, 0, table.data(), 2, 1}}, cache, last);
    const int V = model->config().vocab_size;
    EXPECT_LT(rel_error(last, std::vector<float>(theirs.begin() + (T - 1) * V, theirs.begin() + T * V)), 1e-5);
    fs::remove_all(d);
  }
}

TEST_F(HfDir, DamagedDirectoriesNameTheProblem) {
  Transformer m(small_config(ModelFamily::kLlama));
  m.init_weights(1);
  std::string d = join_path(dir_, "m");
  SaveOptions opt;
  opt.max_shard_bytes = 20000;
  save_hf_model(m, d, opt);

  EXPECT_EQ(error_of([&] { load_hf_model(join_path(dir_, "nothing")); }),
            join_path(dir_, "nothing") + ": missing config.json (is this a model directory?)");
  // A shard listed in the index is missing.
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(d))
    if (starts_with(e.path().filename().string(), "model-")) shards.push_back(e.path().filename().string());
  std::sort(shards.begin(), shards.end());
  ASSERT_GE(shards.size(), 3u);
  std::string shard = join_path(d, shards[1]);
  std::string shard_bytes = read_file(shard);
  fs::remove(shard);
  EXPECT_EQ(error_of([&] { load_hf_model(d); }),
            join_path(d, "model.safetensors.index.json") + ": shard '" + shards[1] + "' listed in the index is missing");
  // Truncated shard.
  write_file_atomic(shard, shard_bytes.substr(0, shard_bytes.size() - 1));
  EXPECT_NE(error_of([&] { load_hf_model(d); }).find("is past the end of the data"), std::string::npos);
  write_file_atomic(shard, shard_bytes);
  load_hf_model(d);

  // Missing required config key; wrong config values.
  std::string cfg_path = join_path(d, "config.json");
  std::string cfg_text = read_file(cfg_path);
  auto j = nlohmann::json::parse(cfg_text);
  j.erase("hidden_size");
  write_file_atomic(cfg_path, j.dump());
  EXPECT_EQ(error_of([&] { load_hf_model(d); }), cfg_path + ": missing required key 'hidden_size'");
  j = nlohmann::json::parse(cfg_text);
  j["num_key_value_heads"] = 3;
  write_file_atomic(cfg_path, j.dump());
  EXPECT_EQ(error_of([&] { load_hf_model(d); }), cfg_path + ": n_kv_head (3) must divide n_head (4)");
  j = nlohmann::json::parse(cfg_text);
  j["hidden_size"] = 48;  // shapes no longer match the weights
  write_file_atomic(cfg_path, j.dump());
  EXPECT_NE(error_of([&] { load_hf_model(d); }).find("has shape [333,40], expected [333,48]"), std::string::npos);
  write_file_atomic(cfg_path, "{not json");
  EXPECT_NE(error_of([&] { load_hf_model(d); }).find(cfg_path + ": not valid JSON"), std::string::npos);
}

TEST(ModelConfig, InvalidValuesNameTheField) {
  auto err = [](ModelConfig c) {
    try {
      c.normalize();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.n_head = 5;
  EXPECT_EQ(err(c), "n_head (5) must divide n_embd (384)");
  c = ModelConfig::preset("llama-tiny");
  c.n_kv_head = 4;
  EXPECT_EQ(err(c), "n_kv_head (4) must divide n_head (6)");
  c = ModelConfig::preset("gpt2-tiny");
  c.n_layer = 0;
  EXPECT_EQ(err(c), "n_layer must be positive, got 0");
  c = ModelConfig::preset("gpt2-tiny");
  c.vocab_size = -3;
  EXPECT_EQ(err(c), "vocab_size must be positive, got -3");
  EXPECT_THROW(ModelConfig::preset("gpt5"), Error);
}

// Hostile or mistyped sizes are refused by their config.json key before anything
// is allocated: the bound, then the machine's memory, then the weights present.
TEST_F(HfDir, AbsurdConfigSizesAreRefusedBeforeAllocating) {
  for (ModelFamily f : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    Transformer m(small_config(f));
    save_hf_model(m, dir_);
    std::string cfg_path = join_path(dir_, "config.json");
    const std::string cfg_text = read_file(cfg_path);
    const bool gpt2 = f == ModelFamily::kGpt2;
    auto with = [&](const char* key, nlohmann::json value) {
      auto j = nlohmann::json::parse(cfg_text);
      j[key] = value;
      write_file_atomic(cfg_path, j.dump());
      MemoryStats::reset_peak();
      const int64_t before = MemoryStats::current();
      std::string e = error_of([&] { load_hf_model(dir_); });
      // Nothing close to the model's size was allocated on the way to the error.
      EXPECT_LT(MemoryStats::peak() - before, int64_t(64) << 20) << key;
      return e;
    };
    const char* layers = gpt2 ? "n_layer" : "num_hidden_layers";
    const char* positions = gpt2 ? "n_positions" : "max_position_embeddings";
    const char* width = gpt2 ? "n_embd" : "hidden_size";
    EXPECT_EQ(with(layers, 1000000000),
              cfg_path + ": '" + layers + "' = 1000000000 is larger than the supported maximum 1024");
    EXPECT_EQ(with(positions, 1 << 30),
              cfg_path + ": '" + positions + "' = 1073741824 is larger than the supported maximum 2097152");
    EXPECT_EQ(with("vocab_size", 1e12), cfg_path + ": 'vocab_size' must be an integer");
    EXPECT_EQ(with("vocab_size", 99999999999999ll),
              cfg_path + ": 'vocab_size' = 99999999999999 is larger than the supported maximum 4194304");
    EXPECT_EQ(with(width, 18446744073709551615ull),
              cfg_path + ": '" + width + "' = 18446744073709551615 is larger than the supported maximum 65536");
    EXPECT_EQ(with(width, -4), cfg_path + ": '" + width + "' must be positive, got -4");
    // Within the bounds but more than this machine holds: named by the largest part.
    std::string e = with(layers, 1024), w;
    {
      auto j = nlohmann::json::parse(cfg_text);
      j[layers] = 1024;
      j[width] = 65536;
      j[gpt2 ? "n_head" : "num_attention_heads"] = 512;
      if (!gpt2) j["num_key_value_heads"] = 512, j["head_dim"] = 128;
      write_file_atomic(cfg_path, j.dump());
      w = error_of([&] { load_hf_model(dir_); });
    }
    EXPECT_NE(w.find("for its parameters and position tables alone (n_layer = 1024 with n_embd = 65536"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("GB of memory this process may use"), std::string::npos) << w;
    // Fits in memory but promises more than the files hold: found from the headers.
    EXPECT_NE(e.find("missing tensor"), std::string::npos) << e;
    EXPECT_NE(e.find("describes 1024 layers"), std::string::npos) << e;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
}

// Phi-3-mini-4k's window (2047 of 4096 positions) windows every layer, and writes
// back; Phi-3.5-mini's (262144 of 131072) is no window at all, nor is null.
TEST(ModelConfig, Phi3SlidingWindowShorterThanTheContextWindowsEveryLayer) {
  nlohmann::json j = {{"model_type", "phi3"}, {"vocab_size", 320}, {"hidden_size", 48}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"intermediate_size", 64},
                      {"max_position_embeddings", 4096}, {"sliding_window", 2047}, {"rope_scaling", nullptr}};
  ModelConfig c = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(c.sliding_window, 2047);
  for (int l = 0; l < 2; ++l) EXPECT_EQ(c.layer_attention(l).window, 2047);
  EXPECT_EQ(c.to_hf_json()["sliding_window"], 2047);
  EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "again").sliding_window, 2047);
  j["sliding_window"] = 262144;
  j["max_position_embeddings"] = 131072;
  c = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(c.family, ModelFamily::kPhi3);
  EXPECT_EQ(c.layer_attention(0).window, 0);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(ModelConfig::from_hf_json(j, "config.json").max_position, 131072);
}

// Mistral: sliding_window (v0.1's 4096 of 32768) windows every layer; null (v0.2
// on) none; a bias is refused by name.
TEST(ModelConfig, MistralSlidingWindowAndRefusedFields) {
  nlohmann::json j = {{"model_type", "mistral"}, {"vocab_size", 32000}, {"hidden_size", 64}, {"num_hidden_layers", 3},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 96},
                      {"max_position_embeddings", 32768}, {"sliding_window", 4096}, {"rope_theta", 10000.0}};
  ModelConfig c = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(c.family, ModelFamily::kMistral);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(c.layer_attention(l).window, 4096);
  EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "again").sliding_window, 4096);
  j["sliding_window"] = nullptr;
  c = ModelConfig::from_hf_json(j, "config.json");
  EXPECT_EQ(c.layer_attention(0).window, 0);
  EXPECT_TRUE(c.to_hf_json()["sliding_window"].is_null());
  j["attention_bias"] = true;
  try {
    ModelConfig::from_hf_json(j, "config.json");
    FAIL() << "attention_bias was accepted for mistral";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: attention_bias is not supported for mistral"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfig, ParameterCountMatchesTheLayoutAndBoundsHold) {
  for (const auto& name : ModelConfig::preset_names()) {
    ModelConfig c = ModelConfig::preset(name);
    for (bool tie : {true, false}) {
      if (c.is_gpt2() && !tie) continue;
      c.tie_embeddings = tie;
      ParamLayout layout(c);
      int64_t numel = 0;
      for (const auto& t : layout.tensors()) numel += t.numel;
      EXPECT_EQ(c.num_parameters(), numel) << name << " tie " << tie;
    }
  }
  // Presets and flags go through the same bounds as config.json.
  ModelConfig c = ModelConfig::preset("llama-tiny");
  c.n_embd = 1 << 30;  // 4 * n_embd would overflow int if it were computed first
  c.intermediate_size = 0;
  c.head_dim = 0;
  EXPECT_EQ(error_of([&] { c.normalize(); }), "n_embd = 1073741824 is larger than the supported maximum 65536");
  c = ModelConfig::preset("llama-tiny");
  c.n_kv_head = 2000;
  EXPECT_EQ(error_of([&] { c.validate(); }), "n_kv_head = 2000 is larger than the supported maximum 1024");
  c = ModelConfig::preset("llama-tiny");
  c.n_layer = 1000, c.n_embd = 16384, c.head_dim = 128, c.n_head = 128, c.n_kv_head = 128,
  c.intermediate_size = 65536;
  EXPECT_NE(error_of([&] { Transformer m(c); }).find("model config: the model needs"), std::string::npos);
}

TEST(ParamLayout, MatchesHuggingFaceGpt2And124MCount) {
  ModelConfig c = ModelConfig::preset("gpt2-124M");
  ParamLayout layout(c);
  // GPT2LMHeadModel's parameter count (lm_head tied to wte).
  EXPECT_EQ(c.num_parameters(), 124439808);
  EXPECT_EQ(layout.tensor("transformer.h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(layout.tensor("transformer.h.11.mlp.c_proj.weight").shape, (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(layout.groups().size(), 14u);
  for (const auto& g : layout.groups()) EXPECT_EQ(g.offset % 16, 0) << g.name;
  // Tensors of a layer are contiguous, inside the group's range.
  const ParamGroup& g = layout.groups()[layout.layer_group(3)];
  int64_t cursor = g.offset;
  for (int t : g.tensors) {
    EXPECT_EQ(layout.tensors()[t].offset, cursor);
    cursor += layout.tensors()[t].numel;
  }
  EXPECT_EQ(cursor, g.offset + g.size);

  ModelConfig l = ModelConfig::preset("llama-tiny");
  ParamLayout ll(l);
  const auto& q = ll.tensor("model.layers.0.self_attn.q_proj.weight");
  const auto& k = ll.tensor("model.layers.0.self_attn.k_proj.weight");
  const auto& v = ll.tensor("model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(k.offset, q.offset + q.numel);  // q|k|v form one matrix
  EXPECT_EQ(v.offset, k.offset + k.numel);
  EXPECT_EQ(k.shape, (std::vector<int64_t>{128, 384}));
  EXPECT_TRUE(ll.find("lm_head.weight").has_value());
}

}  // namespace
}  // namespace distllm
