// Weights read where they are (model_weights.h): memory-mapped safetensors in the
// files' dtype give the same inference model, bit for bit, as the file widened into
// a Transformer, and a bf16 checkpoint served in bf16 never holds an f32 copy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <tuple>

#include "distllm/base/error.h"
#include "distllm/base/memory_stats.h"
#include "distllm/base/rng.h"
#include "distllm/io/file_util.h"
#include "distllm/io/safetensors.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/inference.h"
#include "distllm/model/model_weights.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

ModelConfig config(ModelFamily f, bool tied) {
  ModelConfig c;
  c.family = f;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = f == ModelFamily::kGpt2 ? 4 : 2, c.n_embd = 64, c.vocab_size = 1001;
  c.max_position = 64, c.tie_embeddings = tied, c.rope_theta = 10000.0;
  if (f == ModelFamily::kLlama) c.intermediate_size = 136;
  c.normalize();
  return c;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/distllm_weights_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Saves `model` as a Hugging Face directory with its tensors in `dtype`, in shards,
// so Llama's q/k/v and the head land in different files.
void save_as(const Transformer& model, const std::string& dir, DType dtype) {
  SaveOptions o;
  o.max_shard_bytes = 64 << 10;
  o.overwrite = true;
  o.dtype = dtype;
  save_hf_model(model, dir, o);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    ++files;
    const SafetensorsFile file = SafetensorsFile::open(entry.path().string());
    for (const TensorInfo& t : file.tensors()) ASSERT_EQ(t.dtype, dtype) << t.name;
  }
  EXPECT_GT(files, 1);
  const std::string config = read_file(dir + "/config.json");
  EXPECT_NE(config.find(dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32"),
            std::string::npos);
}

std::vector<float> logits_of(InferenceModel& im, const std::vector<int32_t>& tokens) {
  const int block = 16, blocks = (static_cast<int>(tokens.size()) + block - 1) / block;
  PagedKvCache cache(im.shard_config(), blocks, block, DType::kF32);
  std::vector<int32_t> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  const int n = static_cast<int>(tokens.size());
  std::vector<float> logits;
  im.forward({InferenceChunk{tokens.data(), n, 0, table.data(), blocks, n}}, cache, logits);
  return logits;
}

std::vector<int32_t> tokens_for(const ModelConfig& c) {
  CounterRng rng(5);
  std::vector<int32_t> t(37);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(c.vocab_size));
  return t;
}

// GPT-2 always ties its head; Llama either way.
struct Shape {
  ModelFamily family;
  bool tied;
};
constexpr Shape kShapes[] = {{ModelFamily::kGpt2, true}, {ModelFamily::kLlama, true}, {ModelFamily::kLlama, false}};

// (kShapes index, file dtype, weight dtype)
using Case = std::tuple<int, DType, DType>;
class MappedWeights : public ::testing::TestWithParam<Case> {};

TEST_P(MappedWeights, SameModelBitForBitAsTheWidenedTransformer) {
  auto [shape, file_dtype, weight_dtype] = GetParam();
  auto [family, tied] = kShapes[shape];
  auto model = std::make_shared<Transformer>(config(family, tied));
  model->init_weights(3);
  TempDir dir;
  save_as(*model, dir.path(), file_dtype);

  std::shared_ptr<const ModelWeights> mapped = map_hf_model(dir.path());
  ASSERT_EQ(mapped->flat_f32(), nullptr);
  EXPECT_EQ(mapped->storage_dtype(), file_dtype);
  std::shared_ptr<const Transformer> widened = load_hf_model(dir.path());

  // Any span of the flat layout, across tensors and group padding, reads as the
  // widened buffer does.
  CounterRng rng(11);
  const int64_t total = widened->layout().total_size();
  for (int i = 0; i < 200; ++i) {
    const int64_t a = static_cast<int64_t>(rng.below(static_cast<uint64_t>(total)));
    const int64_t n = static_cast<int64_t>(rng.below(static_cast<uint64_t>(std::min<int64_t>(total - a, 5000)) + 1));
    std::vector<float> got(static_cast<size_t>(n));
    mapped->read_f32(a, n, got.data());
    ASSERT_EQ(0, std::memcmp(got.data(), widened->params() + a, sizeof(float) * static_cast<size_t>(n)))
        << "span [" << a << ", " << a + n << ")";
  }

  InferenceModel from_file(mapped, weight_dtype);
  mapped.reset();  // the model copied everything it reads: the mapping may go
  InferenceModel from_transformer(widened, weight_dtype);
  EXPECT_EQ(from_file.packed_weight_bytes(), from_transformer.packed_weight_bytes());
  const std::vector<int32_t> tokens = tokens_for(model->config());
  const std::vector<float> a = logits_of(from_file, tokens), b = logits_of(from_transformer, tokens);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  auto [shape, file_dtype, weight_dtype] = info.param;
  auto [family, tied] = kShapes[shape];
  return std::string(family == ModelFamily::kGpt2 ? "gpt2" : "llama") + (tied ? "_tied" : "_untied") + "_file_" +
         dtype_short_name(file_dtype) + "_as_" + dtype_short_name(weight_dtype);
}

INSTANTIATE_TEST_SUITE_P(
    FilesAndWeightDtypes, MappedWeights,
    ::testing::Combine(::testing::Range(0, 3),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kI8)),
    case_name);

// A bf16 checkpoint served in bf16: the bytes allocated while the model is built are
// its packed linears, the token table in bf16, the small f32 tensors and one GPT-2
// matrix widened to be transposed, not the f32 model.
TEST(MappedWeightsMemory, Bf16CheckpointServedAsBf16IsNeverWidened) {
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    SCOPED_TRACE(family == ModelFamily::kGpt2 ? "gpt2" : "llama");
    const ModelConfig cfg = config(family, family == ModelFamily::kGpt2);
    TempDir dir;
    {
      Transformer model(cfg);
      model.init_weights(3);
      save_as(model, dir.path(), DType::kBF16);
    }
    std::shared_ptr<const ModelWeights> mapped = map_hf_model(dir.path());
    const int64_t before = MemoryStats::current();
    MemoryStats::reset_peak();
    InferenceModel im(mapped, DType::kBF16);
    const int64_t peak = MemoryStats::peak() - before;

    const int64_t C = cfg.n_embd, V = cfg.vocab_size;
    const int64_t matrices = cfg.n_layer * (C * cfg.qkv_dim() + cfg.attn_dim() * C + C * cfg.mlp_in_dim() + cfg.mlp_act_dim() * C);
    const int64_t small_floats = cfg.num_parameters() - matrices - V * C * (cfg.tie_embeddings ? 1 : 2);
    const int64_t widest_gpt2_matrix = family == ModelFamily::kGpt2 ? C * cfg.mlp_in_dim() * 4 : 0;
    const int64_t bound = static_cast<int64_t>(im.packed_weight_bytes()) + V * C * 2 + small_floats * 4 +
                          widest_gpt2_matrix + 64 * 64 * 40;  // 64-byte padding of each small buffer
    EXPECT_LE(peak, bound);
    EXPECT_LT(peak, cfg.num_parameters() * 4) << "as much as the f32 model";
    // What the built model keeps: every packed linear in bf16 (2 bytes per weight).
    EXPECT_LT(im.packed_weight_bytes(), static_cast<size_t>(cfg.num_parameters() * 4 / 2 + 4096 * 64));
  }
}

TEST(ModelWeights, RefusesMisalignedOrMissingTensors) {
  const ModelConfig cfg = config(ModelFamily::kGpt2, true);
  const ParamLayout layout(cfg);
  std::vector<TensorRef> refs(layout.tensors().size() - 1);
  EXPECT_THROW(ModelWeights(cfg, refs, nullptr), distllm::Error);
  std::vector<uint16_t> bits(8);
  refs.assign(layout.tensors().size(), TensorRef{reinterpret_cast<const uint8_t*>(bits.data()) + 1, DType::kBF16});
  EXPECT_THROW(ModelWeights(cfg, refs, nullptr), distllm::Error);
}

}  // namespace
}  // namespace distllm
