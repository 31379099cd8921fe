#include "distllm/model/hf_checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/base/memory_stats.h"
#include "distllm/io/file_util.h"
#include "distllm/io/safetensors.h"
#include "distllm/io/torch_pickle.h"
#include "distllm/model/family.h"
#include "distllm/model/model_dir.h"

namespace distllm {

namespace fs = std::filesystem;

namespace {

nlohmann::json parse_json_file(const std::string& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_error(strprintf("%s: not valid JSON: %s", path.c_str(), e.what()));
  }
}

std::string shard_name(int k, int n) { return strprintf("model-%05d-of-%05d.safetensors", k, n); }

bool ignorable_tensor(const std::string& name, const ModelConfig& cfg) {
  return family_def(cfg.family).ignorable_tensor(name, cfg);
}

std::string canonical_name(const std::string& name, const ModelConfig& cfg) {
  return family_def(cfg.family).canonical_tensor_name(name);
}

}  // namespace

ModelConfig load_hf_config(const std::string& dir) {
  std::string path = join_path(dir, "config.json");
  DL_CHECK(file_exists(path), "%s: missing config.json (is this a model directory?)", dir.c_str());
  return ModelConfig::from_hf_json(parse_json_file(path), path);
}

std::unique_ptr<Transformer> load_hf_model(const std::string& dir) {
  // Refuse a config the machine cannot hold in f32 before mapping anything.
  load_hf_config(dir).check_fits(usable_memory_bytes(), join_path(dir, "config.json"));
  return map_hf_model(dir)->to_transformer();
}

std::shared_ptr<const ModelWeights> map_hf_model(const std::string& dir) {
  ModelConfig cfg = load_hf_config(dir);
  std::string config_path = join_path(dir, "config.json");
  const ParamLayout layout(cfg);

  // Which files to read: the index's weight_map, or the single file. safetensors
  // first; a directory that ships only PyTorch's pytorch_model.bin (or its shards)
  // is read through the restricted unpickler (torch_pickle.h).
  std::vector<std::string> files;
  std::map<std::string, std::string> expected_file;  // tensor -> shard (from the index)
  std::string index_path;
  for (const char* single : {"model.safetensors", "pytorch_model.bin"}) {
    const std::string index_name = std::string(single) + ".index.json";
    if (file_exists(join_path(dir, index_name))) {
      index_path = join_path(dir, index_name);
      ShardIndex index = parse_shard_index(read_file(index_path), index_path);
      expected_file = index.weight_map;
      files = index.files;
      for (const auto& f : files)
        DL_CHECK(file_exists(join_path(dir, f)), "%s: shard '%s' listed in the index is missing", index_path.c_str(),
                 f.c_str());
      break;
    }
    if (file_exists(join_path(dir, single))) {
      files.push_back(single);
      break;
    }
  }
  DL_CHECK(!files.empty(),
           "%s: no model.safetensors, model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json",
           dir.c_str());

  // First pass, headers only: every tensor the config describes must be present
  // with its shape before the parameters are allocated, so a config that promises
  // more than the files hold fails here, not after gigabytes of zeros.
  struct Source {
    const TensorInfo* info;
    std::span<const uint8_t> bytes;
  };
  struct Opened {  // one weight file of either format; the other is empty
    std::vector<SafetensorsFile> safetensors;
    std::vector<TorchCheckpointFile> torch;
  };
  Opened opened;
  opened.safetensors.reserve(files.size());
  opened.torch.reserve(files.size());
  std::vector<std::optional<Source>> source(layout.tensors().size());
  for (const auto& f : files) {
    std::string path = join_path(dir, f);
    std::vector<Source> in_file;
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0) {
      const TorchCheckpointFile& pt = opened.torch.emplace_back(TorchCheckpointFile::open(path));
      for (size_t i = 0; i < pt.tensors().size(); ++i) in_file.push_back({&pt.tensors()[i], pt.bytes(i)});
    } else {
      const SafetensorsFile& st = opened.safetensors.emplace_back(SafetensorsFile::open(path));
      for (const TensorInfo& info : st.tensors()) in_file.push_back({&info, st.bytes(info)});
    }
    for (const Source& src : in_file) {
      const TensorInfo& info = *src.info;
      std::string name = canonical_name(info.name, cfg);
      auto idx = layout.find(name);
      if (!idx) {
        DL_CHECK(ignorable_tensor(name, cfg), "%s: unexpected tensor '%s' (not part of a %s model with this config)",
                 path.c_str(), info.name.c_str(), cfg.family_name().c_str());
        continue;
      }
      if (!expected_file.empty()) {
        auto ef = expected_file.find(info.name);
        DL_CHECK(ef != expected_file.end() && ef->second == f, "%s: tensor '%s' is not listed for this shard in %s",
                 path.c_str(), info.name.c_str(), index_path.c_str());
      }
      const ParamTensor& t = layout.tensors()[*idx];
      DL_CHECK(info.shape == t.shape, "%s: tensor '%s' has shape %s, expected %s (from %s)", path.c_str(),
               info.name.c_str(), nlohmann::json(info.shape).dump().c_str(), nlohmann::json(t.shape).dump().c_str(),
               config_path.c_str());
      DL_CHECK(dtype_is_float(info.dtype), "%s: tensor '%s' has dtype %s; weights must be F32, F16, BF16 or F64",
               path.c_str(), info.name.c_str(), std::string(dtype_name(info.dtype)).c_str());
      DL_CHECK(!source[*idx], "%s: tensor '%s' appears more than once", path.c_str(), info.name.c_str());
      source[*idx] = src;
    }
  }
  for (size_t i = 0; i < source.size(); ++i)
    DL_CHECK(source[i].has_value(), "%s: missing tensor '%s' (%s describes %d layers, %lld parameters)", dir.c_str(),
             layout.tensors()[i].name.c_str(), config_path.c_str(), cfg.n_layer, (long long)cfg.num_parameters());
  for (const auto& [name, file] : expected_file) {
    std::string canon = canonical_name(name, cfg);
    DL_CHECK(layout.find(canon) || ignorable_tensor(canon, cfg), "%s: index names unknown tensor '%s'",
             index_path.c_str(), name.c_str());
  }

  // The tensors stay where the mapping has them. A tensor a file places off its
  // dtype's alignment (the format does not promise it) is copied, in its dtype.
  struct Mapped {
    Opened files;
    std::vector<AlignedBuffer<uint8_t>> copies;
  };
  auto mapped = std::make_shared<Mapped>();
  std::vector<TensorRef> refs(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    const TensorInfo& info = *source[i]->info;
    std::span<const uint8_t> bytes = source[i]->bytes;
    refs[i] = {bytes.data(), info.dtype};
    if (reinterpret_cast<uintptr_t>(bytes.data()) % dtype_size(info.dtype) != 0) {
      AlignedBuffer<uint8_t>& copy = mapped->copies.emplace_back();
      copy.resize_uninitialized(bytes.size());
      std::memcpy(copy.data(), bytes.data(), bytes.size());
      refs[i].data = copy.data();
    }
  }
  mapped->files = std::move(opened);  // the vectors' buffers move: the mappings, infos and copies stay put
  const Mapped* held = mapped.get();
  auto weights = std::make_shared<const ModelWeights>(cfg, std::move(refs), std::move(mapped), [held] {
    for (const SafetensorsFile& f : held->files.safetensors) f.check_unchanged();
    for (const TorchCheckpointFile& f : held->files.torch) f.check_unchanged();
  });
  weights->check_finite(dir);
  weights->check_source();
  return weights;
}

ShardIndex parse_shard_index(const std::string& text, const std::string& origin) {
  const char* o = origin.c_str();
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_error(strprintf("%s: not valid JSON: %s", o, e.what()));
  }
  DL_CHECK(index.is_object(), "%s: must be a JSON object", o);
  ShardIndex out;
  auto meta = index.find("metadata");
  if (meta != index.end() && !meta->is_null()) {
    DL_CHECK(meta->is_object(), "%s: 'metadata' must be an object", o);
    auto ts = meta->find("total_size");
    if (ts != meta->end() && !ts->is_null()) {
      DL_CHECK(ts->is_number_integer() && ts->get<int64_t>() >= 0, "%s: metadata.total_size must be a non-negative integer",
               o);
      out.total_size = ts->get<int64_t>();
    }
  }
  auto wm = index.find("weight_map");
  DL_CHECK(wm != index.end() && wm->is_object(), "%s: missing object 'weight_map'", o);
  std::set<std::string> seen;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    DL_CHECK(it.value().is_string(), "%s: weight_map entry '%s' must be a file name", o, it.key().c_str());
    std::string f = it.value().get<std::string>();
    DL_CHECK(!f.empty() && f.find('/') == std::string::npos && f.find("..") == std::string::npos,
             "%s: weight_map entry '%s' names '%s', which is not a file in the directory", o, it.key().c_str(),
             f.c_str());
    out.weight_map[it.key()] = f;
    if (seen.insert(f).second) out.files.push_back(f);
  }
  return out;
}

void save_hf_model(const Transformer& model, const std::string& dir, const SaveOptions& options) {
  DL_CHECK(options.dtype == DType::kF32 || options.dtype == DType::kBF16 || options.dtype == DType::kF16,
           "a model directory stores f32, bf16 or f16 weights, not %s", dtype_short_name(options.dtype));
  const ParamLayout& layout = model.layout();
  ModelDirWriter out(dir, options.overwrite);
  const std::string& tmp = out.staging();

  // Group tensors into shards in layout order.
  std::vector<std::vector<const ParamTensor*>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& t : layout.tensors()) {
    uint64_t bytes = static_cast<uint64_t>(t.numel) * dtype_size(options.dtype);
    if (options.max_shard_bytes > 0 && shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  int n = static_cast<int>(shards.size());
  nlohmann::json weight_map = nlohmann::json::object();
  for (int k = 0; k < n; ++k) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const auto& [key, value] : options.metadata) w.set_metadata(key, value);
    for (const ParamTensor* t : shards[k]) {
      if (options.dtype == DType::kF32) w.add_f32(t->name, t->shape, model.params() + t->offset);
      else w.add_converted(t->name, options.dtype, t->shape, model.params() + t->offset);
    }
    std::string name = n == 1 ? "model.safetensors" : shard_name(k + 1, n);
    w.write(join_path(tmp, name));
    out.add_file(name);
    for (const ParamTensor* t : shards[k]) weight_map[t->name] = name;
  }
  if (n > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_file_atomic(join_path(tmp, "model.safetensors.index.json"), index.dump(2));
    out.add_file("model.safetensors.index.json");
  }
  nlohmann::json config = model.config().to_hf_json();
  config["torch_dtype"] = options.dtype == DType::kF32 ? "float32" : options.dtype == DType::kBF16 ? "bfloat16" : "float16";
  if (options.bos_token_id >= 0) config["bos_token_id"] = options.bos_token_id;
  if (options.eos_token_id >= 0) config["eos_token_id"] = options.eos_token_id;
  write_file_atomic(join_path(tmp, "config.json"), config.dump(2));
  out.add_file("config.json");
  nlohmann::json gen = {{"_from_model_config", true}};
  if (options.bos_token_id >= 0) gen["bos_token_id"] = options.bos_token_id;
  if (options.eos_token_id >= 0) gen["eos_token_id"] = options.eos_token_id;
  write_file_atomic(join_path(tmp, "generation_config.json"), gen.dump(2));
  out.add_file("generation_config.json");
  for (const auto& [name, content] : options.extra_files) {
    DL_CHECK(is_model_file_name(name), "%s: '%s' is not a file a model directory holds", dir.c_str(), name.c_str());
    write_file_atomic(join_path(tmp, name), content);
    out.add_file(name);
  }

  out.commit();
}

}  // namespace distllm
