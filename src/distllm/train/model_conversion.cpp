#include "distllm/train/model_conversion.h"

#include <filesystem>
#include <optional>

#include "distllm/base/error.h"
#include "distllm/checkpoint/store.h"
#include "distllm/io/file_util.h"

namespace distllm {

namespace fs = std::filesystem;

std::vector<checkpoint::ParamSpan> checkpoint_spans(const ParamLayout& layout) {
  std::vector<checkpoint::ParamSpan> out;
  for (const auto& t : layout.tensors()) out.push_back({t.name, t.shape, t.offset, t.numel});
  return out;
}

std::unique_ptr<Transformer> load_checkpoint_model(const std::string& source, std::string* step_dir_out,
                                                   int64_t* step_out) {
  // A step directory has a manifest; otherwise take the newest good step.
  const bool is_step = file_exists(join_path(source, checkpoint::kManifestName));
  DL_CHECK(is_step || is_directory(source), "%s: not a checkpoint directory", source.c_str());
  checkpoint::CheckpointStore store(is_step ? fs::path(source).parent_path().string() : source, nullptr,
                                    checkpoint::Retention{});
  std::optional<std::string> found = store.find_resume(is_step ? source : std::string("auto"));
  DL_CHECK(found.has_value(), "%s: holds no complete checkpoint", source.c_str());
  const std::string step_dir = *found;

  checkpoint::CheckpointReader reader = checkpoint::CheckpointReader::open(step_dir);
  const std::string origin = join_path(step_dir, checkpoint::kManifestName);
  ModelConfig cfg = ModelConfig::from_hf_json(reader.manifest().model_config, origin);
  auto model = std::make_unique<Transformer>(cfg);
  const std::vector<checkpoint::ParamSpan> spans = checkpoint_spans(model->layout());
  reader.check_compatible(cfg.to_hf_json(), spans);
  reader.read("param", spans, 0, model->size(), model->params());
  if (step_dir_out) *step_dir_out = step_dir;
  if (step_out) *step_out = reader.manifest().step;
  return model;
}

std::string checkpoint_to_hf(const std::string& source, const std::string& out, const SaveOptions& options) {
  std::string step_dir;
  int64_t step = 0;
  std::unique_ptr<Transformer> model = load_checkpoint_model(source, &step_dir, &step);
  SaveOptions o = options;
  o.metadata["distllm_checkpoint_step"] = std::to_string(step);
  save_hf_model(*model, out, o);
  return step_dir;
}

std::string hf_to_checkpoint(const std::string& hf_dir, const std::string& checkpoint_dir) {
  std::unique_ptr<Transformer> model = load_hf_model(hf_dir);
  const std::vector<checkpoint::ParamSpan> spans = checkpoint_spans(model->layout());
  std::vector<float> zeros(static_cast<size_t>(model->size()), 0.0f);

  checkpoint::SaveRequest req;
  req.step = 0;
  checkpoint::Manifest& m = req.header;
  m.world_size = 1;
  m.strategy = "none";
  m.mesh = {{"shard", 1}, {"replicate", 1}};
  m.model_config = model->config().to_hf_json();
  m.training = {{"converted_from", hf_dir}};
  // What a run that has taken no step holds: `train --resume` starts from here.
  m.trainer = {{"step", 0}, {"optimizer_steps", 0}, {"sampler_position", 0}};
  m.states = {"param", "exp_avg", "exp_avg_sq"};
  req.rank_state = {{"rank", 0}};
  checkpoint::ShardData shard;
  shard.begin = 0;
  shard.end = model->size();
  shard.states = {{"param", model->params()}, {"exp_avg", zeros.data()}, {"exp_avg_sq", zeros.data()}};
  checkpoint::CheckpointStore store(checkpoint_dir, nullptr, checkpoint::Retention{});
  DL_CHECK(store.list().empty(), "%s: already holds checkpoints; convert into an empty directory",
           checkpoint_dir.c_str());
  return store.save(req, spans, shard).dir;
}

}  // namespace distllm
